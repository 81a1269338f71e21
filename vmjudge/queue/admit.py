"""Admitting an entry: its archive checked, the owner's entry limit applied, the archive
stored in the spool and the entry queued.

PhysioNet allowed a few scored entries per phase, and dry runs and entries that could not be
scored did not count. Here `[entry] max_scored_per_owner` limits the entries of one owner on
one board (official or late) of one challenge; a phase of a contest is a challenge of its own.
An entry counts once it is scored, and while it is queued or running, since it may yet be
scored: otherwise ten entries sent at once would all be accepted. Once it ends failed, as a dry
run or parked, it gives its place back. An archive holding DRYRUN at its top can only end as a
dry run (or fail), so it is always accepted and never counts.

The archive is stored in the spool first and every check reads the stored copy, the very bytes
prep will unpack: checking the file as given and then copying it would let it be swapped in
between. The count and the queue row are one transaction that holds off other admissions to
the same board, on this host or (PostgreSQL) any other, so two submissions at once cannot both
take the last place; the spool write and the checks happen under a lock on the home, so a
refused entry leaves nothing in the spool (unless the same bytes were already there, perhaps
another entry's) or the queue.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..archive.checks import check_archive, check_size, declares_dry_run
from ..archive.names import check_archive_name
from ..config import Challenge, Site
from ..errors import EntryError
from .db import Queue
from .spool import Spool


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


@contextmanager
def _admission_lock(path: Path) -> Iterator[None]:
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield  # closing the file releases the lock


def check_names(owner: str, archive_name: str) -> None:
    """Owner and archive names are shown on boards, reports and status lines: one with a newline
    would forge a line there, a control or bidi character would act on a terminal or reorder
    what is read, and one that is not UTF-8 cannot be stored. Refused before anything is."""
    for what, value, longest in (("owner", owner, 64), ("archive name", archive_name, 255)):
        if not value or len(value) > longest or not value.isprintable():
            raise EntryError("bad-name", f"The {what} {value!r} is not allowed: use at most {longest} printable "
                                         "characters (no control characters, newlines or invisible "
                                         "formatting) and submit again.")


def admit(site: Site, queue: Queue, name: str, ch: Challenge, archive: Path, owner: str, late: bool,
          spool: Spool | None = None) -> Admitted:
    """Store the archive (fsynced), check the stored copy, apply the entry limit, then queue it.
    `name` is the challenge as registered, `ch` its challenge.toml; `spool` defaults to the home's."""
    check_names(owner, archive.name)
    check_archive_name(archive.name)
    check_size(ch, name, archive.name, archive.stat().st_size)  # only to spare copying a huge file
    spool = spool if spool is not None else Spool(site.layout.spool)
    limit = ch.entry.max_scored_per_owner
    with _admission_lock(site.layout.submit_lock):  # this host's spool: a refusal removes what it stored
        stored = spool.store(archive)
        try:
            dry_run = declares_dry_run(check_archive(ch, name, stored.path, given_name=archive.name))

            def admissible(scored: int, pending: int) -> None:
                if limit is not None and not dry_run and scored + pending >= limit:
                    board = f"late entries to {name}" if late else name
                    raise EntryError("entry-limit", f"{owner} has used the {_scored_entries(limit)} allowed for "
                                     f"{board} ({scored} scored, {pending} still being evaluated): an entry that "
                                     "ends without a score gives its place back, and a dry run (an entry holding "
                                     "DRYRUN) is always accepted.")
            entry_id = queue.add_entry(name, owner, late, stored.sha256, archive.name, stored.path, dry_run=dry_run,
                                       admissible=admissible)
        except BaseException:
            if stored.new:
                spool.remove(stored)
            raise
        remaining = None if limit is None else max(0, limit - sum(queue.owner_usage(name, owner, late)))
    return Admitted(entry_id, owner, late, dry_run, remaining)
