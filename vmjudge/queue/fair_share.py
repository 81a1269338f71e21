"""Which ready stage a free slot takes next: fair share between owners, in SQL the claim runs
in its own transaction (SQLite and PostgreSQL alike).

First-in-first-out lets one owner's twenty entries run before anyone else's first, and a
batch of re-runs jam a contest. So a slot takes, in this order:
1. participants' stages before the organiser's batch work (`rescore --rerun-stages`), which
   runs only when no participant's stage is ready;
2. the owner who has used the least VM time in the last `[queue] fair_window_hours` (ended
   stage runs as charged, running ones as long as they have run so far, so two slots freed at
   once do not both go to the owner who just started one);
3. an entry already begun (its later stages) before new ones, so entries finish rather than
   interleave;
4. the oldest.
Infrastructure failures are never charged, so a host's trouble does not cost an owner his turn.
"""

from __future__ import annotations

from ..pipeline import PIPELINE

_VM_STAGES = ", ".join(repr(s.name) for s in PIPELINE if s.in_vm)

# owner -> VM seconds used in the window; parameters: now, the window's start (usage_args).
USAGE_BY_OWNER = ("SELECT x.owner AS owner, SUM(COALESCE(r.vm_seconds, CASE WHEN r.finished_at IS NULL "
                  "THEN ? - r.started ELSE 0 END)) AS used FROM stage_runs r JOIN entries x ON x.id = r.entry_id "
                  f"WHERE r.started >= ? AND r.stage IN ({_VM_STAGES}) GROUP BY x.owner")
# On entries e joined with USAGE_BY_OWNER as u; one parameter: the first stage's name.
FAIR_ORDER = "e.batch, COALESCE(u.used, 0), CASE WHEN e.stage = ? THEN 1 ELSE 0 END, e.id"
# The VM time a stage run is charged when it ends with the entry's own result; parameter: now.
CHARGE = f"CASE WHEN stage IN ({_VM_STAGES}) AND started IS NOT NULL THEN ? - started END"


def usage_args(at: float, window: float) -> tuple[float, float]:
    return at, at - window
