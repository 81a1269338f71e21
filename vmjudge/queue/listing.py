"""`vmjudge entries`: the queue's entries, filtered and paged in SQL, newest first.

A busy challenge has thousands of entries; the organiser wants the failed or parked ones of
today, not every row. The filters and the page are the query's, so one page costs the same
whatever the queue holds.
"""

from __future__ import annotations

from dataclasses import dataclass

from .connection import Database
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
        late = None if self.late is None else int(self.late)
        tests = [(f"{column} ?", value) for column, value in (
            ("challenge =", self.challenge), ("outcome =", self.outcome), ("owner =", self.owner),
            ("late =", late), ("submitted_at >=", self.since))  # the queue's times sort as text
            if value is not None]
        clauses, args = [sql for sql, _ in tests], [value for _, value in tests]
        if self.states:
            clauses.append(f"state IN ({','.join('?' * len(self.states))})")
            args.extend(self.states)
        return (" WHERE " + " AND ".join(clauses)) if clauses else "", tuple(args)


@dataclass(frozen=True)
class Page:
    total: int  # entries matching the filter
    offset: int
    entries: list[EntryRow]


def find_entries(database: Database, f: EntryFilter, limit: int, offset: int = 0) -> Page:
    where, args = f.where()
    with database.connect() as db:
        total = db.execute(f"SELECT COUNT(*) FROM entries{where}", args).fetchone()[0]
        rows = db.execute(f"SELECT * FROM entries{where} ORDER BY id DESC LIMIT ? OFFSET ?",
                          (*args, limit, offset)).fetchall()
    return Page(total=int(total), offset=offset, entries=[EntryRow.from_row(r) for r in rows])
