"""PostgreSQL: a claim and its stage run's start as a daemon makes them, each one statement in a
transaction of its own (autocommit), where each took a transaction of four or five round trips.

A claim with 4 claimers on 2 cores spent its time in round trips (BEGIN, the claim, its event,
COMMIT; then BEGIN, the entry locked, the run inserted, the entry's lease_run set, COMMIT: nine,
each a wake-up of a client and of a server process) and in the two commits' WAL flushes, which
stay (issue 36, bench/queue_bench.py). What each statement does is what the transaction did, in
the same order, under the same row locks; SQLite, one writer at a time in its own process, keeps
the transactions (db.py), which cost it no round trip.

- the claim: claim.take_first_logged, the usual claim (the least-used owners' first head) and its
  event. When it takes nothing, the claim goes on as before in a transaction (claim_fair.py:
  every owner's head in turn, then the organiser's batch), without this statement's try again:
  its UPDATE changed nothing and held no lock, so splitting it off is the same as running it first
  in that transaction (READ COMMITTED: each statement sees what was committed when it starts).
- the start: the entry locked while this host's claim still holds it with no run (else nothing:
  StaleClaim), the run inserted with its attempt counted, the entry's lease_run set to it (the
  trigger of running.py, fired at the statement's end, sees the run). A stage 3 start, which
  also records the exam's start (publish.py), keeps its transaction.
"""

from __future__ import annotations

import time
from typing import Any

from ..pipeline import SILENT
from .claim import take_first_logged
from .connection import Db
from .fair_share import USAGE_BY_OWNER, usage_args
from .publish import record_exam_start
from .rows import now, stamp

START = ("WITH held AS (SELECT id, evaluation, batch FROM entries WHERE id = ? AND state = 'running' "
         "AND lease_owner = ? AND lease_run IS NULL FOR UPDATE), "
         "run AS (INSERT INTO stage_runs (entry_id, stage, attempt, host, slot, started_at, evaluation, started, "
         "organiser) SELECT held.id, ?, 1 + (SELECT COUNT(*) FROM stage_runs WHERE entry_id = ? AND stage = ?), "
         "?, ?, ?, held.evaluation, ?, held.batch FROM held RETURNING *), "
         "leased AS (UPDATE entries SET lease_run = run.id FROM run WHERE entries.id = run.entry_id) "
         "SELECT * FROM run")


def claim_alone(db: Db, skip_locked: str, host: str, lease: float, fair_window: float, where: str,
                args: tuple[Any, ...], at: float) -> Any:
    """The participants' usual claim and its event, one statement outside any transaction: the
    entry's row, or None (the claim then goes on in a transaction: take_fairly's skip_first)."""
    usage = usage_args(at, fair_window)
    return db.execute(take_first_logged(where, USAGE_BY_OWNER, skip_locked),
                      (0, *usage, 0, at, *args, host, at + lease, 0, at, *args, now(), host)).fetchone()


def start_alone(db: Db, entry_id: int, stage: str, host: str, slot: int, started: float) -> Any:
    """The stage run's start, one statement outside any transaction: its row, or None when the
    host's claim on the entry was lost (or a run already holds it)."""
    return db.execute(START, (entry_id, host, stage, entry_id, stage, host, slot, stamp(started),
                              started)).fetchone()


def start_held(db: Db, for_update: str, entry_id: int, stage: str, host: str, slot: int) -> Any:
    """The stage run's start within a transaction (SQLite; a stage 3 start on either): the same
    as start_alone, in three statements, and the exam's start recorded with stage 3's."""
    row = db.execute("SELECT state, lease_owner, lease_run, evaluation, batch FROM entries WHERE id = ?" + for_update,
                     (entry_id,)).fetchone()
    if row is None or (row["state"], row["lease_owner"], row["lease_run"]) != ("running", host, None):
        return None
    started = time.time()
    run = db.execute(  # its attempt counted in the same statement: a round trip fewer per claim
        "INSERT INTO stage_runs (entry_id, stage, attempt, host, slot, started_at, evaluation, started, "
        "organiser) VALUES (?, ?, 1 + (SELECT COUNT(*) FROM stage_runs WHERE entry_id = ? AND stage = ?), "
        "?, ?, ?, ?, ?, ?) RETURNING *",
        (entry_id, stage, entry_id, stage, host, slot, stamp(started), row["evaluation"], started,
         row["batch"])).fetchone()
    if stage == SILENT:
        record_exam_start(db, entry_id, started)
    db.execute("UPDATE entries SET lease_run = ? WHERE id = ?", (run["id"], entry_id))
    return run
