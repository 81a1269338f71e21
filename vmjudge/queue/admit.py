"""Admitting an entry: its archive checked, the owner's entry limit applied, the archive
stored in the spool and the entry queued.

PhysioNet allowed a few scored entries per phase, and dry runs and entries that could not be
scored did not count. Here `[entry] max_scored_per_owner` limits the entries of one owner on
one board (official or late) of one challenge; a phase of a contest is a challenge of its own.
An entry counts once it is scored, and while it is queued or running, since it may yet be
scored: otherwise ten entries sent at once would all be accepted. Once it ends failed, as a dry
run or parked, it gives its place back. An archive holding DRYRUN at its top can only end as a
dry run (or fail), so it is always accepted and never counts.

The count, the spool write and the queue row happen under one lock on the home, so two
submissions at once cannot both take the last place, and a refused entry leaves nothing in
the spool or the queue.
"""

from __future__ import annotations

import fcntl
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from ..config import Challenge, Site
from ..errors import EntryError
from .db import Queue
from .spool import Spool, check_archive_name, check_readable


@dataclass(frozen=True)
class Admitted:
    """A queued entry; `remaining` is how many more scored entries the owner may submit on
    this board now (None: no limit)."""

    entry_id: int
    owner: str
    late: bool
    dry_run: bool
    remaining: int | None

    def remaining_line(self) -> str | None:
        """What `submit` tells the owner about the limit, or None when there is none."""
        if self.remaining is None:
            return None
        verb = "remains" if self.remaining == 1 else "remain"
        line = f"{_scored_entries(self.remaining)} {verb} for {self.owner}{' on the late board' if self.late else ''}"
        return f"a dry run does not count: {line}" if self.dry_run else line


def _scored_entries(n: int) -> str:
    return f"{n} scored {'entry' if n == 1 else 'entries'}"


def declares_dry_run(members: list[str]) -> bool:
    """Whether DRYRUN lies at the top of the entry, where the quiz stage looks for it; names are
    read as prep reads them ("./DRYRUN" and "DRYRUN/" are DRYRUN)."""
    for name in members:
        parts = [p for p in name.split("/") if p not in ("", ".")]
        if parts and parts[0] == "DRYRUN":
            return True
    return False


@contextmanager
def _admission_lock(home: Path) -> Iterator[None]:
    with open(home / "submit.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield  # closing the file releases the lock


def check_archive(ch: Challenge, name: str, archive: Path) -> list[str]:
    """What can be checked without unpacking (name, size, readability, member count); the member
    names. The replica ISO's check runs this too, so it refuses what `submit` would."""
    kind = check_archive_name(archive.name)
    size = archive.stat().st_size
    if size > ch.entry.max_size:
        raise EntryError("bad-archive", f"{archive.name} is {size / 1e6:.1f} MB, over the "
                         f"{ch.entry.max_size / 1e6:.1f} MB that {name} accepts: make the entry smaller and "
                         "submit again.")
    return check_readable(archive, kind, ch.entry.max_members)


def admit(site: Site, queue: Queue, name: str, ch: Challenge, archive: Path, owner: str, late: bool) -> Admitted:
    """Check what can be checked without unpacking, apply the entry limit, store the archive
    (fsynced), then queue it. `name` is the challenge as registered, `ch` its challenge.toml."""
    dry_run = declares_dry_run(check_archive(ch, name, archive))
    limit = ch.entry.max_scored_per_owner
    with _admission_lock(site.home):
        if limit is not None and not dry_run:
            scored, pending = queue.owner_usage(name, owner, late)
            if scored + pending >= limit:
                board = f"late entries to {name}" if late else name
                raise EntryError("entry-limit", f"{owner} has used the {_scored_entries(limit)} allowed for "
                                 f"{board} ({scored} scored, {pending} still being evaluated): an entry that "
                                 "ends without a score gives its place back, and a dry run (an entry holding "
                                 "DRYRUN) is always accepted.")
        stored = Spool(site.home / "spool").store(archive)
        entry_id = queue.add_entry(name, owner, late, stored.sha256, archive.name, stored.path, dry_run=dry_run)
        remaining = None if limit is None else max(0, limit - sum(queue.owner_usage(name, owner, late)))
    return Admitted(entry_id, owner, late, dry_run, remaining)
