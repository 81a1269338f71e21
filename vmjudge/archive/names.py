"""The entry archive's file name, PhysioNet's rule: it ends in `entry.zip` or `entry.tar.gz`; for a
container challenge, any name ending in `.tar`, `.tar.gz` or `.tgz`, as `docker save` and
`podman save` write an image and as Grand Challenge takes it (its template's do_save.sh writes
`<tag>_<time>.tar.gz`); for a submission challenge, any name ending in `.zip` (DrivenData's
`submission.zip`).

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
         "container": ((".tar.gz", "image.tar.gz"), (".tgz", "image.tar.gz"), (".tar", "image.tar")),
         "submission": ((".zip", "zip"),)}
KINDS = tuple(fmt for names in NAMES.values() for _, fmt in names)


def check_archive_name(name: str, entry_kind: str = "archive") -> str:
    """The format ("zip", "tar.gz"; "image.tar", "image.tar.gz") of an entry archive's file name
    for a challenge whose entries are of `entry_kind`, as PhysioNet required: the name ends with
    entry.zip or entry.tar.gz (a prefix such as alice- is allowed), or for images with .tar,
    .tar.gz or .tgz."""
    for ending, fmt in NAMES[entry_kind]:
        if name.endswith(ending):
            return fmt
    if entry_kind == "container":
        raise EntryError("bad-archive", f"Improper name ({name}) for a container entry: give the saved image a name "
                                        "ending in .tar or .tar.gz, as `docker save -o team-image.tar` or Grand "
                                        "Challenge's do_save.sh (<tag>_<time>.tar.gz) write it.")
    if entry_kind == "submission":
        raise EntryError("bad-archive", f"Improper name ({name}) for a submission: upload the zip file, named "
                                        "submission.zip as DrivenData's runtimes pack it (any name ending in .zip).")
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
