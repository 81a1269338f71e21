"""The entry archive's file name, PhysioNet's rule: it ends in `entry.zip` or `entry.tar.gz`; for a
container challenge (#39), in `image.tar` or `image.tar.gz`, as `docker save` and `podman save`
write an image (`docker save app | gzip > team-image.tar.gz`).

The name is the only thing that says how to read the archive, so `submit`, the spool (which
keeps the format in the stored file's name) and prep all take the format from here. An image's
name says only that it is an image: whether it is gzipped, and whether it is Docker's or OCI's
layout, is read from its bytes (archive/image_layout.py), as a participant may well gzip a file
named .tar.
"""

from __future__ import annotations

from ..errors import EntryError

# Each entry kind's names: the ending, and the format it gives. Longer endings first.
NAMES = {"archive": (("entry.zip", "zip"), ("entry.tar.gz", "tar.gz")),
         "container": (("image.tar.gz", "image.tar.gz"), ("image.tar", "image.tar"))}
KINDS = tuple(fmt for names in NAMES.values() for _, fmt in names)


def check_archive_name(name: str, entry_kind: str = "archive") -> str:
    """The format ("zip", "tar.gz"; "image.tar", "image.tar.gz") of an entry archive's file name
    for a challenge whose entries are of `entry_kind`, as PhysioNet required: the name ends with
    entry.zip or entry.tar.gz (a prefix such as alice- is allowed), or for images with image.tar
    or image.tar.gz."""
    for ending, fmt in NAMES[entry_kind]:
        if name.endswith(ending):
            return fmt
    if entry_kind == "container":
        raise EntryError("bad-archive", f"Improper name ({name}) for a container entry: name the saved image "
                                        "image.tar or image.tar.gz (a prefix such as alice-image.tar.gz is allowed).")
    raise EntryError("bad-archive", f"Improper name ({name}) for entry: name it entry.zip or entry.tar.gz "
                                    "(a prefix such as alice-entry.zip is allowed).")


def stored_format(name: str) -> str:
    """The format of an archive the spool holds, of either kind: the spool keeps what admission
    let in, for challenges of both kinds. A name of neither kind is refused as an archive's."""
    for names in NAMES.values():
        for ending, fmt in names:
            if name.endswith(ending):
                return fmt
    return check_archive_name(name)
