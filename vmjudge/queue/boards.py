"""A leaderboard's candidates: each owner's best scored entry of one board, chosen in SQL.

The board ranks each owner's best entry by its "score", highest first or, for a challenge whose
order is "lower", lowest first, a tie going to the earlier submission (reports/leaderboard.py).
Reading every done entry of the queue to find them cost 104 ms at 5,000 entries and grew with
the queue (issue 36: a board must answer in under 0.3 s at 100,000); the database reads the
board's scored entries and keeps one per owner, so what comes back is a row per owner. The
score is read from the entry's scores (JSON text) as dialect.py says, 0 when it has none, as the
board shows it.
"""

from __future__ import annotations

from .connection import Database
from .publish import EXAMINING
from .rows import EntryRow

PRIMARY = "score"  # the field every scorer returns and the board ranks by


def _board(database: Database, challenge: str, late: bool, phase: str | None,
           at: float | None) -> tuple[str, tuple[object, ...]]:
    """SQL (on entries e) for the scored entries a board counts `at` (an entry being examined then
    is left out: publish.py) or, with `at` None, as the organiser sees them; and its arguments."""
    seen, args = (f" AND NOT {EXAMINING}", (at,)) if at is not None else ("", ())
    return ("e.state = 'done' AND e.outcome = 'scored' AND e.challenge = ? AND e.late = ? "
            "AND COALESCE(e.phase, '') = ? AND e.scores IS NOT NULL AND e.scores NOT IN ('{}', 'null')"
            f"{seen}", (challenge, int(late), phase or "", *args))


def scored_entries(database: Database, challenge: str, late: bool, phase: str | None,
                   at: float | None) -> list[EntryRow]:
    """Every scored entry the board counts, in the order submitted (the board's history)."""
    where, args = _board(database, challenge, late, phase, at)
    with database.connect() as db:
        rows = db.execute(f"SELECT * FROM entries e WHERE {where} ORDER BY e.submitted_at, e.id", args).fetchall()
    return [EntryRow.from_row(r) for r in rows]


def best_entries(database: Database, challenge: str, late: bool, phase: str | None,
                 at: float | None, lower_first: bool = False) -> list[EntryRow]:
    """Each owner's best scored entry on the board of `challenge` (late or official, of `phase`
    in a contest), as participants see it `at` (an entry being examined then is left out:
    publish.py) or, with `at` None, as the organiser does. Best is highest, or with
    `lower_first` lowest."""
    score = f"COALESCE({database.dialect.json_number.format(column='e.scores', key=PRIMARY)}, 0)"
    where, args = _board(database, challenge, late, phase, at)
    direction = "ASC" if lower_first else "DESC"
    with database.connect() as db:
        rows = db.execute(  # the window sorts narrow rows; the winners' whole rows are read by id
            "SELECT x.* FROM entries x JOIN (SELECT e.id AS id, ROW_NUMBER() OVER (PARTITION BY e.owner "
            f"ORDER BY {score} {direction}, e.submitted_at, e.id) AS place FROM entries e WHERE {where}) b "
            "ON b.id = x.id WHERE b.place = 1", args).fetchall()
    return [EntryRow.from_row(r) for r in rows]
