"""What `submit` checks on an entry archive without unpacking it: its name, its size, that it
is a readable archive of its kind, and how many members it holds and declares to unpack to; for
a container challenge, the image archive read through (container_image.py).

The submitter runs these on the copy stored in the spool, the one prep will unpack, never on
the file it was given, which could change in between. The replica ISO's check runs them too, so
a participant's rehearsal refuses what `submit` would.
"""

from __future__ import annotations

from pathlib import Path

from ..config import Challenge
from ..config.submission import MAINS
from ..errors import EntryError, VmjudgeError
from .bounded import Refused, host_error, member_names
from .container_image import CheckedImage, ImageLimits, check_image
from .names import check_archive_name


def check_archive(ch: Challenge, name: str, archive: Path, given_name: str | None = None) -> list[str]:
    """What can be checked without unpacking (name, size, readability, member count); the member
    names. `given_name` is what the participant called the file (default: its own name). The
    replica ISO's check runs this too, so it refuses what `submit` would."""
    given = given_name or archive.name
    kind = check_archive_name(given, ch.entry.kind)
    check_size(ch, name, given, archive.stat().st_size)
    members = check_readable(archive, kind, ch.entry.max_members, ch.entry.max_unpacked, name=given)
    if ch.entry.kind == "submission" and not {m.removeprefix("./") for m in members} & set(MAINS):
        raise EntryError("missing-component", f"{given} holds no main.py or main.sh at its top, which the runtime "
                                              "runs: zip the files themselves, not their folder (cd into it and run "
                                              "`zip -r ../submission.zip .`).")
    return members


def check_container(ch: Challenge, name: str, archive: Path, given_name: str | None = None) -> CheckedImage:
    """A container challenge's entry (name, size, the image read through): what the root will be
    made from. An image with no command of its own is refused unless the challenge names one."""
    given = given_name or archive.name
    check_archive_name(given, "container")
    check_size(ch, name, given, archive.stat().st_size)
    image = check_image(archive, ImageLimits(ch.entry.max_members, ch.entry.max_unpacked), name=given)
    if not image.config.command and not (ch.container and ch.container.command):
        raise EntryError("bad-image", f"The image names no command to run (no ENTRYPOINT or CMD), and {name} names "
                                      "none either: add ENTRYPOINT or CMD to the image, save it and submit again.")
    return image


def check_size(ch: Challenge, name: str, given: str, size: int) -> None:
    """Refuse an archive larger than challenge `name` accepts; `given` is the participant's name for it."""
    if size > ch.entry.max_size:
        # In bytes: one byte over 50 MB is "52.4 MB, over the 52.4 MB" when rounded.
        raise EntryError("bad-archive", f"{given} is {size:,} bytes, over the {ch.entry.max_size:,} bytes "
                         f"that {name} accepts: make the entry smaller and "
                         "submit again.")


def check_readable(path: Path, kind: str, max_members: int, max_unpacked: int, name: str | None = None) -> list[str]:
    """Refuse a file that is not a readable archive of its kind, or that holds more than
    `max_members` members, reading only its member list, which is returned (names as stored,
    unchecked: prep checks them). Listing stops at the first member past the limit, so a small
    archive of millions of empty members costs no more than one at the limit; an archive whose
    members declare more than `max_unpacked` bytes is refused too (a tar's listing stops there).

    `name` is what the participant called the file (the spool's own name is a hash); it
    defaults to the file's name. Nothing is extracted. The host's own read errors are not the
    archive's fault: they are a VmjudgeError saying so.
    """
    shown = name or path.name
    try:
        return member_names(path, kind, max_members, max_unpacked)
    except EntryError:
        raise
    except Refused as exc:
        raise EntryError("bad-archive", f"{shown} holds {exc}: make it with `zip -r` or `tar czf` and submit "
                                        "again.") from exc
    except Exception as exc:
        host = host_error(exc)
        if isinstance(host, OSError):
            raise VmjudgeError(f"cannot read {path} ({host.strerror or host}): check the disk and submit "
                               "again.") from exc
        if host is not None:
            raise
        said = str(exc).replace(str(path), shown) or type(exc).__name__  # the participant's name, not the spool's path
        raise EntryError("bad-archive", f"{shown} is not a readable {kind} archive ({said}): "
                                        "make it with `zip -r` or `tar czf` and submit again.") from exc


def declares_dry_run(members: list[str]) -> bool:
    """Whether DRYRUN lies at the top of the entry, where the quiz stage looks for it; names are
    read as prep reads them ("./DRYRUN" and "DRYRUN/" are DRYRUN)."""
    for name in members:
        parts = [p for p in name.split("/") if p not in ("", ".")]
        if parts and parts[0] == "DRYRUN":
            return True
    return False
