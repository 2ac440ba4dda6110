"""Print the requirements of orchrm and of the named extras of pyproject.toml, one a line.

The image installs them in a layer of their own before it copies the package, so a change of the
code does not reinstall the dependencies (only a change of pyproject.toml does):

    python docker/requirements.py pipeline server > requirements.txt
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

SELF = re.compile(r"^orchrm\[(?P<extras>[^\]]+)\]")


def requirements(pyproject: Path, extras: list[str]) -> list[str]:
    """The core dependencies and those of ``extras``, an extra that names ``orchrm[...]``
    contributing its own extras' requirements instead of itself; each line once, in order."""
    project = tomllib.loads(pyproject.read_text())["project"]
    optional = project.get("optional-dependencies", {})
    lines: list[str] = list(project["dependencies"])
    seen: set[str] = set()
    todo = list(extras)
    while todo:
        extra = todo.pop(0)
        if extra in seen:
            continue
        if extra not in optional:
            raise SystemExit(f"pyproject.toml has no extra {extra!r}; it has {', '.join(sorted(optional))}")
        seen.add(extra)
        for line in optional[extra]:
            own = SELF.match(line)
            if own:
                todo.extend(name.strip() for name in own["extras"].split(","))
            else:
                lines.append(line)
    return list(dict.fromkeys(lines))


if __name__ == "__main__":
    print("\n".join(requirements(Path("pyproject.toml"), sys.argv[1:])))
