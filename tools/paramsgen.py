"""Write ``params.yaml``'s base sections from the dataclasses of :mod:`dynamix.config`.

    python -m tools.paramsgen            # rewrite params.yaml's base (make params-yaml)
    python -m tools.paramsgen --check    # exit 1, showing the difference, when it is not what this writes

Everything before the ``profiles:`` key is written here: the header, ``profile`` (its value kept from the
file, the profile in force) and every section of :class:`dynamix.config.Config` with every field at its
default. Each key carries its documentation, :func:`dynamix.config.doc_of`: a field's ``setting(...,
doc=...)``, a section's docstring summary. A text that fits goes beside the key (``key: value  # doc``),
a longer one above it as comment lines, wrapped at :data:`WIDTH` columns. ``profiles:`` and everything
after it are kept byte for byte: profiles are written by hand.

``tests/test_config.py`` fails when the committed ``params.yaml`` differs from what this writes, so a
setting documented or given a new default in ``dynamix/config.py`` cannot leave the file behind.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
import textwrap
import typing
from pathlib import Path

import yaml

from dynamix import config, paths
from tools import generated

WIDTH = 110
"""The longest line written (the project's line length)."""
COMMENT_COLUMN = 24
"""Where a comment beside a short key starts, at the least two spaces after the value."""

HEADER = """\
# The only configuration file. Top-level sections map onto the frozen dataclasses of dynamix/config.py,
# which carry each setting's default, allowed range and documentation. Everything above `profiles:` is
# generated from them by tools/paramsgen.py (make params-yaml): edit dynamix/config.py, not these lines
# (tests/test_config.py fails when the two differ). `profiles` below holds partial overrides of the base,
# written by hand; `profile` selects one.
# Switch profile for a DVC run with: dvc exp run -S profile=smoke
"""

PROFILES = "\nprofiles:"
"""Where the hand-written part of params.yaml begins."""

_PLAIN = re.compile(r"[A-Za-z0-9_./][A-Za-z0-9_./-]*")
"""A string written unquoted in a flow list; a block value may also hold ``:`` and ``=`` (``static:64``)."""


def scalar(value: typing.Any, flow: bool = False) -> str:
    """``value`` as YAML text that reads back as the same value: ``true``, ``0.0005``, ``tiny-cnn``,
    ``"static:32"`` (quoted where YAML needs it; in a flow list also where a ``:`` or ``=`` is)."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, int):
        text = str(value)
    elif isinstance(value, float):
        text = repr(value)
        if "e" in text or "inf" in text or "nan" in text:
            raise ValueError(f"{value!r}: write this default as a plain decimal YAML reads back as a float")
    elif isinstance(value, str):
        plain = _PLAIN.fullmatch(value) if flow else _PLAIN.fullmatch(value.replace(":", "").replace("=", ""))
        text = value if plain and ": " not in value else json.dumps(value)
        if yaml.safe_load(text) != value:
            text = json.dumps(value)
    elif isinstance(value, tuple):
        return "[" + ", ".join(scalar(v, flow=True) for v in value) + "]"
    else:
        raise TypeError(f"no YAML form for {value!r}")
    assert yaml.safe_load(f"[{text}]" if flow else text) == ([value] if flow else value), value
    return text


def _lines(cls: type, depth: int, values: dict[str, typing.Any]) -> list[str]:
    """The lines of section ``cls`` at nesting ``depth``, each field at its declared default (never a built
    instance's value: ``rl.recipe`` resolves its knobs left ``""`` when a section is built) or at
    ``values[name]``."""
    indent = "  " * depth
    hints = typing.get_type_hints(cls)
    out: list[str] = []
    for f in dataclasses.fields(cls):
        doc = config.doc_of(cls, f.name)
        section = dataclasses.is_dataclass(hints[f.name])
        key = f"{indent}{f.name}:" + ("" if section else f" {scalar(values.get(f.name, f.default))}")
        beside = f"{key.ljust(COMMENT_COLUMN)}  # {doc}"
        if len(beside) <= WIDTH:
            out.append(beside)
        else:
            out += textwrap.wrap(doc, WIDTH, initial_indent=f"{indent}# ", subsequent_indent=f"{indent}# ",
                                 break_long_words=False, break_on_hyphens=False)
            out.append(key)
        if section:
            out += _lines(hints[f.name], depth + 1, {})
        if depth == 0:
            out.append("")  # a blank line after each top-level key
    return out


def render(text: str) -> str:
    """``params.yaml``'s text ``text`` with its base sections written from the dataclasses: the
    header, ``profile`` (its value in ``text`` kept) and every section; ``profiles:`` on as it is."""
    if PROFILES not in text:
        raise ValueError("params.yaml has no top-level `profiles:` key")
    base, rest = text.split(PROFILES, 1)
    profile = (yaml.safe_load(base) or {}).get("profile", config.Config().profile)
    body = _lines(config.Config, 0, {"profile": profile})
    return HEADER + "\n".join(body).rstrip("\n") + "\n" + PROFILES + rest


def main(argv: list[str] | None = None) -> int:
    return generated.main(argv, Path(paths.PARAMS), render, "paramsgen", "params-yaml", __doc__)


if __name__ == "__main__":
    sys.exit(main())
