"""`vmjudge entries`: the queue's entries, filtered and paged in SQL, newest first.

A busy challenge has thousands of entries; the organiser wants the failed or parked ones of
today, not every row. The filters and the page are the query's, so one page costs the same
whatever the queue holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .connection import connect
from .rows import EntryRow

STATES = ("queued", "running", "done", "parked")
OUTCOMES = ("scored", "dry-run", "failed")


@dataclass(frozen=True)
class EntryFilter:
    challenge: str | None = None
    states: tuple[str, ...] = ()  # any of STATES; empty: all
    outcome: str | None = None  # one of OUTCOMES
    owner: str | None = None
    late: bool | None = None  # True: late entries only; False: official only; None: both
    since: str | None = None  # submitted at or after this queue time ("2026-11-24" or "2026-11-24T10:00:00Z")

    def where(self) -> tuple[str, tuple[object, ...]]:
        clauses: list[str] = []
        args: list[object] = []
        if self.challenge is not None:
            clauses.append("challenge = ?")
            args.append(self.challenge)
        if self.states:
            clauses.append(f"state IN ({','.join('?' * len(self.states))})")
            args.extend(self.states)
        if self.outcome is not None:
            clauses.append("outcome = ?")
            args.append(self.outcome)
        if self.owner is not None:
            clauses.append("owner = ?")
            args.append(self.owner)
        if self.late is not None:
            clauses.append("late = ?")
            args.append(int(self.late))
        if self.since is not None:
            clauses.append("submitted_at >= ?")  # the queue's times sort as text
            args.append(self.since)
        return (" WHERE " + " AND ".join(clauses)) if clauses else "", tuple(args)


@dataclass(frozen=True)
class Page:
    total: int  # entries matching the filter
    offset: int
    entries: list[EntryRow]


def find_entries(queue_path: Path, f: EntryFilter, limit: int, offset: int = 0) -> Page:
    where, args = f.where()
    with connect(queue_path) as db:
        total = db.execute(f"SELECT COUNT(*) FROM entries{where}", args).fetchone()[0]
        rows = db.execute(f"SELECT * FROM entries{where} ORDER BY id DESC LIMIT ? OFFSET ?",
                          (*args, limit, offset)).fetchall()
    return Page(total=int(total), offset=offset, entries=[EntryRow.from_row(r) for r in rows])
