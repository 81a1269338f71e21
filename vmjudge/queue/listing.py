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
    phase: str | None = None  # a contest's phase; None: every entry, in a phase or not
    owners: tuple[str, ...] = ()  # any of these owners (a person and their teams); empty: any

    def where(self) -> tuple[str, tuple[object, ...]]:
        late = None if self.late is None else int(self.late)
        tests = [(f"{column} ?", value) for column, value in (
            ("challenge =", self.challenge), ("outcome =", self.outcome), ("owner =", self.owner),
            ("late =", late), ("submitted_at >=", self.since), ("phase =", self.phase))  # times sort as text
            if value is not None]
        clauses, args = [sql for sql, _ in tests], [value for _, value in tests]
        for column, values in (("state", self.states), ("owner", self.owners)):
            if values:
                clauses.append(f"{column} IN ({','.join('?' * len(values))})")
                args.extend(values)
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


@dataclass(frozen=True)
class Active:
    id: int
    challenge: str
    owner: str
    state: str
    stage: str | None


# How many entries `vmjudge status` lists by default: every running and parked one comes first,
# then the oldest queued; the counts say how many more there are, and `vmjudge entries` pages them.
STATUS_LISTED = 100


@dataclass(frozen=True)
class Status:
    active: list[Active]  # running and parked, then the oldest queued, at most `listed` of them, by id
    counts: dict[str, int]  # entries in each of STATES

    @property
    def done(self) -> int:
        return self.counts["done"]

    @property
    def waiting(self) -> int:
        """Entries queued, running or parked."""
        return sum(self.counts[s] for s in ("queued", "running", "parked"))

    @property
    def unlisted(self) -> int:
        """Entries waiting or running that `active` leaves out."""
        return self.waiting - len(self.active)

    def as_json(self) -> dict[str, object]:
        """`vmjudge status --json`'s entries part (the bench reads the same document)."""
        return {"active": [{"id": e.id, "challenge": e.challenge, "owner": e.owner, "state": e.state,
                            "stage": e.stage} for e in self.active],
                "unlisted": self.unlisted, "counts": self.counts, "done": self.done}


def queue_status(database: Database, listed: int = STATUS_LISTED) -> Status:
    """`vmjudge status`: the entries not done, in five columns, and how many are in each state.
    With 100,000 entries queued, listing them all took 0.4-0.5 s and told the organiser nothing
    a count does not (issue 36): the running and parked ones come first, as they are what an
    organiser looks for, then the oldest queued; both are read through the index on (state, id)."""
    columns = "SELECT id, challenge, owner, state, stage FROM entries"
    with database.connect() as db:
        rows = db.execute(f"{columns} WHERE state IN ('running', 'parked') ORDER BY id LIMIT ?", (listed,)).fetchall()
        rows += db.execute(f"{columns} WHERE state = 'queued' ORDER BY id LIMIT ?",
                           (listed - len(rows),)).fetchall()
        counts = dict.fromkeys(STATES, 0)
        by_state = db.execute("SELECT state, COUNT(*) FROM entries GROUP BY state").fetchall()
    counts.update((r[0], int(r[1])) for r in by_state)
    active = sorted((Active(int(r[0]), r[1], r[2], r[3], r[4]) for r in rows), key=lambda a: a.id)
    return Status(active, counts)


@dataclass(frozen=True)
class OwnerUsage:
    owner: str
    late: bool
    entries: int
    scored: int
    vm_seconds: float  # charged: never the judge's own failures, nor the organiser's re-runs
    organiser_seconds: float = 0.0  # the organiser's re-runs of the owner's entries: shown, never charged
    phase: str | None = None  # a contest's phase: each has boards, and budgets, of its own


def usage_by_owner(database: Database, challenge: str, owner: str | None = None,
                   phase: str | None = None) -> list[OwnerUsage]:
    """Each owner's entries and charged VM time on each board of `challenge` (of each phase of a
    contest, or of `phase` alone) (`vmjudge usage`), and apart from it the VM time the
    organiser's re-runs of them took, so the organiser sees both and the owner is charged only
    the first."""
    where, args = ("WHERE e.challenge = ? AND e.owner = ?", (challenge, owner)) if owner else \
        ("WHERE e.challenge = ?", (challenge,))
    if phase is not None:
        where, args = where + " AND e.phase = ?", (*args, phase)
    with database.connect() as db:
        rows = db.execute(
            "SELECT e.owner AS owner, e.late AS late, e.phase AS phase, COUNT(*) AS entries, "
            "SUM(CASE WHEN e.state = 'done' AND e.outcome = 'scored' THEN 1 ELSE 0 END) AS scored, "
            "SUM(COALESCE(r.used, 0)) AS used, SUM(COALESCE(r.organiser, 0)) AS organiser FROM entries e "
            "LEFT JOIN (SELECT entry_id, SUM(CASE WHEN organiser = 0 THEN vm_seconds END) AS used, "
            "SUM(CASE WHEN organiser = 1 THEN vm_seconds END) AS organiser "
            f"FROM stage_runs GROUP BY entry_id) r ON r.entry_id = e.id {where} GROUP BY e.owner, e.phase, e.late "
            "ORDER BY e.owner, COALESCE(e.phase, ''), e.late", args).fetchall()
    return [OwnerUsage(r["owner"], bool(r["late"]), int(r["entries"]), int(r["scored"]), float(r["used"]),
                       float(r["organiser"]), r["phase"]) for r in rows]
