"""Putting back a stage the infrastructure broke, whoever noticed: the slot that ran it
(Queue.infra_failure) or another host that found its lease expired (leases.py).

Both count the failure against the entry's current evaluation and follow the retry policy, so
an entry that brings down every host that runs it ends parked, not run for ever.
"""

from __future__ import annotations

import json
import time
from typing import Any

from .connection import Db
from .outbox import entry_ended
from .publish import record_publish
from .retry import Retry, after_infra_failure
from .rows import now


def event(db: Db, entry_id: int | None, kind: str, detail: str) -> None:
    db.execute("INSERT INTO events (entry_id, at, kind, detail) VALUES (?, ?, ?, ?)", (entry_id, now(), kind, detail))


def requeue_or_park(db: Db, entry_id: int, stage: str, evaluation: int, run_id: int | None, attempt: int,
                    reason: str, message: str, manifest: dict[str, Any], park: bool = False) -> bool:
    """Close the run as the infrastructure's, then queue the stage again after the policy's
    delay, or park the entry (at once when `park`). True if queued again."""
    if run_id is not None:
        db.execute("UPDATE stage_runs SET finished_at = ?, status = 'infra', reason = ?, message = ?, "
                   "manifest = ? WHERE id = ?", (now(), reason, message, json.dumps(manifest), run_id))
    failures = db.execute("SELECT COUNT(*) FROM stage_runs WHERE entry_id = ? AND stage = ? AND "
                          "evaluation = ? AND status = 'infra'", (entry_id, stage, evaluation)).fetchone()[0]
    retry = Retry(again=False, delay=0.0) if park else after_infra_failure(max(failures, 1))
    db.execute("UPDATE entries SET state = ?, lease_owner = NULL, lease_run = NULL, lease_until = NULL, reason = ?, "
               "not_before = ? WHERE id = ?", ("queued" if retry.again else "parked",
                                               None if retry.again else reason, time.time() + retry.delay, entry_id))
    if not retry.again:
        record_publish(db, entry_id)
        entry_ended(db, entry_id)  # the owner's message and the organisers', with the parking itself
    event(db, entry_id, "infra", f"{stage} attempt {attempt}: {reason}: {message}"
          + ("" if retry.again else f" (parked after {failures} failures)"))
    return retry.again
