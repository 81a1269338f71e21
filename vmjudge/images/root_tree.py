"""A container entry's unpacked tree made safe to keep, before it becomes a squashfs: what the
image may carry but the entry's root must not.

- Character and block devices (and sockets, which no tar holds) are removed: the guest gives
  the entry the devices it needs, and a device node in the root would otherwise reach the
  guest's hardware as the entry's user. FIFOs stay: they reach nothing but each other.
- Setuid and setgid bits are cleared, on files and directories: the entry runs as one user,
  never root, and must not gain another's rights through a binary of its own image.
- Symbolic links stay as they are and are never followed: the walk reads entries with lstat
  and descends only into real directories, so a link to /etc or ../../.. leads nowhere on the
  host. (umoci resolves links inside the tree while it applies the layers, and mksquashfs
  stores links as links.)

The walk is iterative, since a layer may nest directories thousands deep.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

SETID = stat.S_ISUID | stat.S_ISGID


@dataclass(frozen=True)
class TreeFacts:
    """What the walk found and did: regular files (each inode once) and their bytes, and the
    device nodes removed and setuid or setgid bits cleared."""

    files: int
    bytes: int
    devices_removed: int
    setid_cleared: int


def neutralise(root: Path) -> TreeFacts:
    files = size = removed = cleared = 0
    seen: set[int] = set()
    cleared += _clear_setid(str(root), os.lstat(root).st_mode)
    stack = [str(root)]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                st = entry.stat(follow_symlinks=False)
                mode = st.st_mode
                if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISSOCK(mode):
                    os.unlink(entry.path)
                    removed += 1
                    continue
                if stat.S_ISLNK(mode):
                    continue
                cleared += _clear_setid(entry.path, mode)
                if stat.S_ISDIR(mode):
                    stack.append(entry.path)
                elif stat.S_ISREG(mode) and st.st_ino not in seen:
                    seen.add(st.st_ino)
                    files += 1
                    size += st.st_size
    return TreeFacts(files, size, removed, cleared)


def _clear_setid(path: str, mode: int) -> int:
    """Clear the bits on `path`, which lstat found not to be a link (the tree is the judge's
    alone while it is made, so it cannot have become one since)."""
    if not mode & SETID:
        return 0
    os.chmod(path, stat.S_IMODE(mode) & ~SETID)
    return 1
