"""Which ready stage a free slot takes next: fair share between owners, in SQL the claim runs
in its own transaction (SQLite and PostgreSQL alike).

First-in-first-out lets one owner's twenty entries run before anyone else's first, and a
batch of re-runs jam a contest. So a slot takes, in this order:
1. participants' stages before the organiser's batch work (`rescore --rerun-stages`), which
   runs only when no participant's stage is ready;
2. the owner who has used the least VM time in the last `[queue] fair_window_hours`, counted
   by the hour (ended stage runs as charged, running ones as long as they have run so far, so
   two slots freed at once do not both go to the owner who just started one);
3. an entry already begun (its later stages) before new ones, so entries finish rather than
   interleave;
4. the oldest.
claim.py takes them in this order by owners, not by stages, so that a claim costs the same
whatever the number of ready stages. Infrastructure failures are never charged, so a host's
trouble does not cost an owner his turn.

Nor is the organiser's batch work: a re-run is the organiser's choice (a fixed image, a
corrected stage), not the owner's, so its stage runs (`organiser`, set from the entry's `batch`
when they start) record the VM time they used but are never charged to the owner, neither
while they run nor once they end, and here as in the VM-time budget (db.py `_owner_usage`).
Otherwise a re-run would push the owner's later entries down the order and spend the hours
that let them submit. What else an organiser starts is an owner's own: `vmjudge evaluate`
submits as the owner it names (by default the user running it), through the same admission as
`submit` (entry limit and budget apply) and onto that owner's board, so it is charged like any
entry; were it not, `evaluate --owner alice` would put entries on alice's board past her budget.
"""

from __future__ import annotations

import time

from ..pipeline import VM_STAGES
from .connection import Db
from .rows import StageRun
from .running import RUNNING_BY_OWNER

HOUR = 3600

# owner -> VM seconds used in the window: the charged time of ended runs, kept per owner and
# hour in owner_usage, and the time so far of the owners' own runs now holding an entry, kept per
# owner in owner_running (running.py): a claim reads a few rows per owner, never a row per run.
# Parameters: usage_args(now, window).
USAGE_BY_OWNER = ("SELECT t.owner AS owner, SUM(t.used) AS used FROM ("
                  f"SELECT owner, seconds AS used FROM owner_usage WHERE hour >= ? UNION ALL {RUNNING_BY_OWNER}) t "
                  "GROUP BY t.owner")


def usage_args(at: float, window: float) -> tuple[int, float]:
    """The window counts by the hour: it reaches back to the start of the hour `window` ago. An
    integer, as owner_usage.hour is: compared with a float, PostgreSQL reads every hour ever
    kept (the column cast, its index unused)."""
    return int((at - window) // HOUR), at


def charge(db: Db, run: StageRun, until: float | None = None) -> float | None:
    """Within the transaction that records a stage run's own result (never an infrastructure
    failure): its VM time, on the run and (unless it is the organiser's) in its owner's hour;
    None for a stage on the host. `until`: when participants see the run end, if not now (a
    container's stage 1, publish.py), so that what it is charged tells no more than they see."""
    if run.stage not in VM_STAGES or run.started is None:
        return None
    seconds = max(0.0, (time.time() if until is None else until) - run.started)
    if run.organiser:
        return seconds
    db.execute("INSERT INTO owner_usage (owner, hour, seconds) VALUES ((SELECT owner FROM entries WHERE id = ?), ?, ?) "
               "ON CONFLICT(owner, hour) DO UPDATE SET seconds = owner_usage.seconds + excluded.seconds",
               (run.entry_id, int(run.started // HOUR), seconds))
    return seconds
