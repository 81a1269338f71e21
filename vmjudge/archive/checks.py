"""What `submit` checks on an entry archive without unpacking it: its name, its size, every member
and the totals they declare, and what stage 1 checks of the entry's files (components.py); for a
container challenge, the image archive read through (container_image.py).

The submitter runs these on the copy stored in the spool, the one prep will unpack, never on
the file it was given, which could change in between. The replica ISO's check runs them too, so
a participant's rehearsal refuses what `submit` would.
"""

from __future__ import annotations

from pathlib import Path

from ..config import Challenge
from ..errors import EntryError, VmjudgeError
from .components import HEAD, Listed, check_components
from .container_image import CheckedImage, ImageLimits, check_image
from .names import check_archive_name
from .unpack import UnpackLimits, listed, read_head


def check_archive(ch: Challenge, name: str, archive: Path, given_name: str | None = None) -> list[str]:
    """Everything stage 1 checks on the host, without unpacking: the name, the size, every member (its
    name, its type, its place, the declared totals: unpack.listed, one reading of the headers), and the
    entry's components (archive/components.py, the scripts' first bytes read); the members' paths.
    `given_name` is what the participant called the file (default: its own name). The replica ISO's
    check runs this too, so it refuses what `submit` would."""
    given = given_name or archive.name
    kind = check_archive_name(given, ch.entry.kind)
    check_size(ch, name, given, archive.stat().st_size)
    try:
        with listed(archive, kind, UnpackLimits(ch.entry.max_members, ch.entry.max_unpacked), name=given) as members:
            by_path = {m.path: m for m in members}
            check_components(ch, Listed.of([(m.path, m.is_dir, m.size) for m in members],
                                           lambda rel: read_head(by_path[rel], HEAD)), kind)
    except OSError as exc:  # the host's own reading, never the archive's fault
        raise VmjudgeError(f"cannot read {archive} ({exc.strerror or exc}): check the disk and submit "
                           "again.") from exc
    return [m.path for m in members]


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


def declares_dry_run(members: list[str]) -> bool:
    """Whether DRYRUN lies at the top of the entry, where the quiz stage looks for it; names are
    read as prep reads them ("./DRYRUN" and "DRYRUN/" are DRYRUN)."""
    for name in members:
        parts = [p for p in name.split("/") if p not in ("", ".")]
        if parts and parts[0] == "DRYRUN":
            return True
    return False
