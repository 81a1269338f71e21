"""What a challenge directory holds, as hashes: every host that judges a challenge must hold
the same, so that an entry's score does not depend on the host that happened to take it.

One hash per top-level part (challenge.toml, training/, test/, reference/, ...), so that a
host whose copy differs can be told which part to copy again. A directory's hash covers each
file's path below it and its bytes (links followed, as a copy would), not times or modes.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from ..files import sha256_file


def _tree_sha256(directory: Path) -> str:
    h = hashlib.sha256()
    for root, dirs, files in os.walk(directory, followlinks=True):
        dirs.sort()
        for name in sorted(files):
            path = Path(root) / name
            h.update(str(path.relative_to(directory)).encode("utf-8", "surrogateescape") + b"\0")
            h.update(sha256_file(path).encode() + b"\0")
    return h.hexdigest()


def fingerprint(directory: Path) -> dict[str, str]:
    """part -> sha256, for each file and directory at the top of the challenge directory."""
    parts = {}
    for path in sorted(Path(directory).iterdir()):
        if path.name.startswith(".") or path.name == "__pycache__":
            continue  # an editor's or Python's leftovers are not the challenge
        parts[path.name + ("/" if path.is_dir() else "")] = _tree_sha256(path) if path.is_dir() else sha256_file(path)
    return parts


def differences(registered: dict[str, str], here: dict[str, str]) -> list[str]:
    """The parts that differ, as a reader would name them ("test/ differs", "extra/ is missing here")."""
    said = []
    for part in sorted(set(registered) | set(here)):
        if part not in here:
            said.append(f"{part} is missing here")
        elif part not in registered:
            said.append(f"{part} is not in the registered copy")
        elif registered[part] != here[part]:
            said.append(f"{part} differs")
    return said
