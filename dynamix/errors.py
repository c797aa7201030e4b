"""Errors a user can cause and fix: a bad config value, a bad policy or cluster spec, a missing or
refused input file.

Every such error is a :class:`UserError` whose message names the field or file and the allowed range
or choices. ``dynamix <command>`` prints it as one line, ``dynamix <command>: error: <message>``, and
exits with status 2 (``-v`` shows the traceback instead); anything else is a bug and keeps its
traceback. A base module: it imports nothing from the package.
"""

from __future__ import annotations


class UserError(Exception):
    """A mistake in the user's input; the message names the field or file and what is allowed."""


class InputFileError(UserError):
    """An input file is missing, unreadable, or refused (corrupt, or made for something else)."""
