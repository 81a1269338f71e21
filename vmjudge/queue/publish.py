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

Stage 1 of a container entry has a publish time too (issue 54). Its root is content-addressed:
made in seconds or minutes, or found in milliseconds when anyone submitted the same layers
before, and a participant polling the entry would time the difference. So when such a stage 1
ends (passed or failed) its end is published at

    prep publish time = stage 1's start + (its time + what making its root would have added)
                        rounded up to the next PREP_STEP,

"what making would have added" being, for a reused root, the time its making took when it was
made (its record's made_seconds) less the time this stage spent getting it: made or reused, the
same whole number of steps. Until then participants see stage 1 running (participant.py), the
entry's message waits (its outbox row's not_before is this time), its owner's counts keep it
waiting and its charge unseen (usage.py), and the quiz is not claimed before it (the entry's
not_before, as a retry's delay): no VM slot is held meanwhile. It is kept in `published` while
the exam has not started (record_exam_start replaces it with the exam's), and the run is
charged until it, as participants see it run (fair_share.charge).
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

from ..pipeline import FIRST, SILENT
from .connection import Db
from .rows import EntryRow, StageRun

# SQL on entries e, one parameter (now): the entry is "being examined" for participants, so
# what its exam did (its outcome, its exam's VM time, its place back under the limits) is not
# yet theirs to see, in any count that answers them either (db.py _owner_usage).
EXAMINING = "(e.exam_started IS NOT NULL AND (e.published IS NULL OR e.published > ?))"
STEPS = 10  # the exam's cap in tenths: what a participant may learn of its time
# The step for an exam whose cap no run recorded (parked before its VM measured anything):
# one tenth of PhysioNet's one-hour cap.
DEFAULT_CAP = 3600.0
# SQL on entries e, one parameter (now): stage 1's end is not yet published (PREPARING in Python).
PREPARING = "(e.exam_started IS NULL AND e.published IS NOT NULL AND e.published > ?)"
# The step stage 1 of a container entry is published at: longer than making the root of an image of a
# few hundred MB takes (docs/authors.md: 2-4.5 s for 104 MB, 30 s for 1.08 GB on the project's machine),
# so that for most images made and found made both read as one step; a larger one reads as whole steps,
# and a making's own variation from one time to the next shows only where it crosses a step's boundary.
PREP_STEP = 30.0
# The key of stage 1's manifest (stages/prep/container.py) that asks for its publish time: the
# seconds it spent getting its root, and the seconds making that root took (or takes).
PREP_TIMING = "prep_publish"


def being_examined(entry: EntryRow, at: float) -> bool:
    """Whether participants see the entry as "being examined" at `at`: its exam started in this
    evaluation and its publish time has not come (or is not known yet). EXAMINING in Python."""
    return entry.exam_started is not None and (entry.published is None or at < entry.published)


def preparing(entry: EntryRow, at: float) -> bool:
    """Whether participants see the entry still in stage 1 at `at`, whatever became of it: the
    container prep's publish time has not come. PREPARING in Python."""
    return entry.exam_started is None and entry.published is not None and at < entry.published


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


def prep_publish_time(started: float, ended: float, root_seconds: float, made_seconds: float) -> float:
    """Stage 1's publish time: its time from `started` to `ended`, with what getting its root
    took (`root_seconds`) counted as what making it took (`made_seconds`: the same when it was
    made, its record's when reused), rounded up to a whole PREP_STEP; never before `ended`."""
    seen = (ended - started) + max(0.0, made_seconds - root_seconds)
    if PREP_STEP <= 0:
        return started + seen
    return started + PREP_STEP * max(1, math.ceil(round(seen / PREP_STEP, 6)))


def record_prep_publish(db: Db, run: StageRun, manifest: dict[str, Any]) -> float | None:
    """Within the transaction that records stage 1's own result (passed or failed): its publish
    time, when its manifest asks for one (PREP_TIMING) and the exam has not started, and the
    entry's next stage held back until then. The time, or None."""
    timing = manifest.get(PREP_TIMING)
    if run.stage != FIRST or run.started is None or not isinstance(timing, dict):
        return None
    at = prep_publish_time(run.started, time.time(), float(timing.get("root_seconds", 0.0)),
                           float(timing.get("made_seconds", 0.0)))
    held = db.execute("UPDATE entries SET published = ?, not_before = ? WHERE id = ? AND exam_started IS NULL",
                      (at, at, run.entry_id)).rowcount
    return at if held else None
