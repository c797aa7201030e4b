"""Keep ``requirements.lock`` and ``environment.yml`` in step.

``requirements.in`` names the direct dependencies; ``requirements.lock`` pins everything (pip
freeze); ``environment.yml`` is the conda mirror: python plus the direct dependencies at their lock
versions, installed by pip inside the conda env (conda cannot solve these pins offline here).
``python tools/lockfile.py`` (``make lock``) rewrites environment.yml from the other two.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from dynamix import paths

_NAME = re.compile(r"^([A-Za-z0-9_.\-]+)")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(path: Path) -> dict[str, str]:
    """{canonical name: version} for every ``name==version`` line."""
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip().removeprefix("- ")  # YAML list items too
        if "==" in line:
            name, version = line.split("==", 1)
            pins[canonical(name.strip())] = version.strip()
    return pins


def direct_names(path: Path | None = None) -> list[str]:
    path = path or paths.ROOT / "requirements.in"
    out = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        m = _NAME.match(line)
        if m:
            out.append(canonical(m.group(1)))
    return out


def environment_yml() -> str:
    lock = read_pins(paths.ROOT / "requirements.lock")
    lines = [
        "# Conda mirror of requirements.lock (generated: python tools/lockfile.py). The pip section",
        "# carries the exact pins; a test checks they agree with the lock.",
        "name: dynamix",
        "channels:",
        "  - conda-forge",
        "dependencies:",
        f"  - python={sys.version_info.major}.{sys.version_info.minor}",
        "  - pip",
        "  - pip:",
    ]
    lines += [f"      - {name}=={lock[name]}" for name in direct_names()]
    lines.append("      - -e .")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    (paths.ROOT / "environment.yml").write_text(environment_yml())
