"""vmjudge's own Python sources as they go on a CD, for a guest's python3 to import: the replica's check
(replica/build.py) and an isolated scorer (stages/score/isolated.py). The guest imports only the
pure-Python part of them; nothing of the host's environment (click, libvirt, psycopg) is needed there."""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def package_files() -> dict[str, Path]:
    """Every .py file of the package, by its path from the package's parent ("vmjudge/...")."""
    return {str(p.relative_to(PACKAGE_DIR.parent)): p for p in sorted(PACKAGE_DIR.rglob("*.py"))
            if "__pycache__" not in p.parts}
