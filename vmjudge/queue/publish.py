"""When participants may see what came of an entry's exam: its publish time.

The exam runs on the hidden test set, and its run time is a channel: an entry can sleep as
long as each record's label says. The report gives that time in tenths of the exam's cap
only, but a participant who polls the entry's state would see the exact moment the exam
ended (and its score appeared) whatever the report rounds. So from the moment the exam
starts, participants see the entry as "being examined" until

    publish time = exam start + the exam's time rounded up to the next tenth of its cap,

the tenth the report shows, and every timestamp they see after the exam started is that
time. The daemon does not wait for it: the publish time is recorded when the entry's result
is, and every participant view applies it (reports/participant.py). When the result is ready
only after that boundary (the judge's own steps, VM boot and shutdown, scoring, retries of
its failures, took it past), the publish time is the first tenth boundary after the result
was ready: later than the report's tenth, never earlier, so what a participant can time is
still a whole number of tenths from the exam's start.
"""

from __future__ import annotations

import json
import math
import time

from ..pipeline import SILENT
from .connection import Db
from .rows import EntryRow

# SQL on entries e, one parameter (now): the entry is "being examined" for participants, so
# what its exam did (its outcome, its exam's VM time, its place back under the limits) is not
# yet theirs to see, in any count that answers them either (db.py _owner_usage).
EXAMINING = "(e.exam_started IS NOT NULL AND (e.published IS NULL OR e.published > ?))"
STEPS = 10  # the exam's cap in tenths: what a participant may learn of its time
# The step for an exam whose cap no run recorded (parked before its VM measured anything):
# one tenth of PhysioNet's one-hour cap.
DEFAULT_CAP = 3600.0


def being_examined(entry: EntryRow, at: float) -> bool:
    """Whether participants see the entry as "being examined" at `at`: its exam started in this
    evaluation and its publish time has not come (or is not known yet). EXAMINING in Python."""
    return entry.exam_started is not None and (entry.published is None or at < entry.published)


def tenths(used: float | None, cap: float | None) -> int | None:
    """`used` as whole tenths of `cap`, rounded up (any use at all is at least 1/10), at most 10."""
    if used is None or not cap:
        return None
    return min(STEPS, max(0, math.ceil(round(STEPS * used / cap, 6))))


def publish_time(started: float, exam_seconds: float | None, cap: float | None, ready: float) -> float:
    """The first tenth boundary after the exam's `started` that is at or after both the
    exam's time in tenths (as the report gives it) and the moment the result was `ready`."""
    step = (cap or DEFAULT_CAP) / STEPS
    shown = tenths(exam_seconds, cap) or 0
    waited = math.ceil(round((ready - started) / step, 6))
    return started + step * max(shown, waited, 0)


def record_exam_start(db: Db, entry_id: int, started: float) -> None:
    """The first exam run of an evaluation starts the hidden time (a retry does not restart it)."""
    db.execute("UPDATE entries SET exam_started = COALESCE(exam_started, ?), published = NULL WHERE id = ?",
               (started, entry_id))


def record_publish(db: Db, entry_id: int) -> None:
    """Within the transaction that ends the entry (done or parked): its publish time, when its
    exam started in this evaluation; the counted exam run's figures give its time and cap."""
    row = db.execute("SELECT exam_started, evaluation, exam_time_hidden FROM entries WHERE id = ?",
                     (entry_id,)).fetchone()
    if row is None or row["exam_started"] is None:
        return
    run = db.execute("SELECT figures FROM stage_runs WHERE entry_id = ? AND stage = ? AND evaluation = ? "
                     "AND figures IS NOT NULL AND status IS NOT NULL AND status != 'infra' ORDER BY id DESC LIMIT 1",
                     (entry_id, SILENT, row["evaluation"])).fetchone()
    figures = json.loads(run["figures"]) if run is not None else {}
    cap = figures.get("stage_limit")
    # A phase that keeps the exam's time back: published at the cap, as if the exam took all of it.
    used = cap if row["exam_time_hidden"] else figures.get("stage_seconds")
    at = publish_time(float(row["exam_started"]), used, cap, time.time())
    db.execute("UPDATE entries SET published = ? WHERE id = ?", (at, entry_id))
