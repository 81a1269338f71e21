"""The entry archive's file name, PhysioNet's rule: it ends in `entry.zip` or `entry.tar.gz`.

The name is the only thing that says how to read the archive, so `submit`, the spool (which
keeps the kind in the stored file's name) and prep all take the kind from here.
"""

from __future__ import annotations

from ..errors import EntryError

KINDS = ("zip", "tar.gz")


def check_archive_name(name: str) -> str:
    """Return "zip" or "tar.gz" for an entry archive's file name, as PhysioNet required:
    the name ends with entry.zip or entry.tar.gz (a prefix such as alice- is allowed)."""
    if name.endswith("entry.zip"):
        return "zip"
    if name.endswith("entry.tar.gz"):
        return "tar.gz"
    raise EntryError("bad-archive", f"Improper name ({name}) for entry: name it entry.zip or entry.tar.gz "
                                    "(a prefix such as alice-entry.zip is allowed).")
