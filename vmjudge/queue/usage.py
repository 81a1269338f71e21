"""What one owner has used of one board of a challenge, in one transaction's view: for the
entry limit, the VM-time budget and the portal's limits (rows.py Usage says what each is).

Every count is as participants see it (publish.py): an entry being examined is pending and
waiting until its publish time, whatever it became, and its exam's VM time is charged from
then; so is a container entry whose stage 1 ended but is not yet published, and its stage 1's
time. Otherwise a participant submitting while their entry is examined would read the exam's
end from a place given back, a budget's tenth moving, or a pending limit no longer reached.
The organiser's re-runs are never the owner's (fair_share.py says why). In a contest each
phase has boards of its own: its entries are counted apart from every other phase's, but for
the portal's limits, which are the challenge's.
"""

from __future__ import annotations

import time

from ..pipeline import UNPUBLISHED
from .connection import Db
from .publish import EXAMINING, PREPARING
from .rows import Usage, stamp

_UNPUBLISHED = ", ".join(repr(name) for name in UNPUBLISHED)
# One board: a challenge, an owner, official or late, and (in a contest) one phase; '' for none,
# since NULL = NULL is not true in SQL and `IS` is written differently by the two databases.
_BOARD = "e.challenge = ? AND e.owner = ? AND e.late = ? AND COALESCE(e.phase, '') = ?"


def owner_usage(db: Db, challenge: str, owner: str, late: bool, phase: str | None = None) -> Usage:
    """What `owner` has used of one board of `challenge` (of its phase `phase`, in a contest)."""
    board, at = (challenge, owner, int(late), phase or ""), time.time()
    row = db.execute(  # an entry being examined is pending, whatever it became, until its publish time
        f"SELECT COALESCE(SUM(CASE WHEN e.state = 'done' AND e.outcome = 'scored' AND NOT {EXAMINING} THEN 1 "
        f"ELSE 0 END), 0) AS scored, COALESCE(SUM(CASE WHEN (e.state IN ('queued', 'running') OR {EXAMINING} "
        f"OR {PREPARING}) AND e.dry_run = 0 THEN 1 ELSE 0 END), 0) AS pending, "
        "COALESCE(SUM(CASE WHEN e.state != 'parked' THEN 1 ELSE 0 END), 0) AS submitted "
        f"FROM entries e WHERE {_BOARD}", (at, at, at, *board)).fetchone()
    used = db.execute("SELECT COALESCE(SUM(r.vm_seconds), 0) FROM stage_runs r JOIN entries e ON e.id = r.entry_id "
                      f"WHERE {_BOARD} AND r.organiser = 0 AND NOT ("
                      f"r.stage IN ({_UNPUBLISHED}) AND r.evaluation = e.evaluation AND {EXAMINING}) "
                      f"AND NOT (r.evaluation = e.evaluation AND {PREPARING})",
                      (*board, at, at)).fetchone()[0]
    both = db.execute(  # both boards, for the portal's limits: in the last hour, waiting, bytes kept
        "SELECT COALESCE(SUM(CASE WHEN e.submitted_at >= ? THEN 1 ELSE 0 END), 0) AS r, COALESCE(SUM(CASE WHEN "
        f"e.state IN ('queued', 'running') OR {EXAMINING} OR {PREPARING} THEN 1 ELSE 0 END), 0) AS w, "
        "COALESCE(SUM(e.archive_bytes), 0) AS b, "
        "COALESCE(SUM(CASE WHEN e.dry_run = 1 AND e.submitted_at >= ? THEN 1 ELSE 0 END), 0) AS d "
        "FROM entries e WHERE e.challenge = ? AND e.owner = ?",
        (stamp(at - 3600), at, at, stamp(at - 86400), challenge, owner)).fetchone()
    promoted = phase is not None and db.execute(
        "SELECT 1 FROM promotions WHERE challenge = ? AND phase = ? AND owner = ?", (challenge, phase, owner)
    ).fetchone() is not None
    if phase is None:  # the phase's own counts mean nothing on a challenge's board
        return Usage(int(row["scored"]), int(row["pending"]), float(used), int(both[0]), int(both[1]), int(both[2]),
                     dry_runs_last_day=int(both[3]))
    return Usage(int(row["scored"]), int(row["pending"]), float(used), int(both[0]), int(both[1]), int(both[2]),
                 dry_runs_last_day=int(both[3]), submitted=int(row["submitted"]), passed=int(row["scored"]),
                 promoted=promoted)
