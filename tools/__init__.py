"""Developer tools run from the repository root, outside the runtime package (``python tools/<tool>.py``)."""
