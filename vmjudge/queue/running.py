"""Each owner's VM stages running now, kept as two numbers by the database itself.

Fair share weighs an owner's running stages for as long as they have run (fair_share.py). Summing
them at each claim reads every running entry; a judge runs few at a time, but a claim's cost must
not grow with anything the queue holds (issue 36: bench/queue_bench.py keeps thousands running).
So the queue keeps, per owner, how many of its own VM stages run (`runs`) and the sum of their
start times (`started`): at time t they have run `runs * t - started` seconds in all. Each owner's
numbers are kept in SHARDS rows (by run id): claimers that start stages of the same owner at once
(fair share sends them all to the least-used owner) would otherwise wait in turn for that one
row's lock until each commit (PostgreSQL, 4 claimers: 222-230 claims/s with one row, 253-312
without the trigger).

Triggers on entries.lease_run keep the two up to date, in the very transaction that starts or
ends a run, whichever code does it (a result, an infrastructure failure, a cancelled stage, a
dead daemon's requeue, an expired lease): lease_run is set only by start_stage and cleared by
every change that ends a run. A run counts when it is a VM stage and not the organiser's: a run
is the organiser's when its entry is batch work as it starts (start_stage), and an entry's batch
cannot change while it runs (rerun refuses a running entry), so the entry's batch says it here,
and the trigger reads no column a test of an older schema drops. A queue made before this table
gains it with the runs now running counted.
"""

from __future__ import annotations

from ..pipeline import VM_STAGES
from .dialect import POSTGRESQL, Dialect

_VM_LIST = ", ".join(repr(name) for name in VM_STAGES)
NAME = "owner_running"
TRIGGERS = ("owner_running_lease",)
SHARDS = 8
TABLE = ("CREATE TABLE IF NOT EXISTS owner_running (owner TEXT NOT NULL, shard INTEGER NOT NULL, "
         "runs INTEGER NOT NULL, started DOUBLE PRECISION NOT NULL, PRIMARY KEY (owner, shard))")
# A run of NEW's (or OLD's) lease that fair share charges while it runs.
_COUNTED = ("SELECT r.started FROM stage_runs r WHERE r.id = {side}.lease_run AND {side}.batch = 0 "
            f"AND r.stage IN ({_VM_LIST}) AND r.started IS NOT NULL")
_ADD = (f"INSERT INTO owner_running (owner, shard, runs, started) SELECT NEW.owner, NEW.lease_run % {SHARDS}, 1, "
        "c.started FROM (" + _COUNTED.format(side="NEW") + ") c WHERE true ON CONFLICT (owner, shard) DO UPDATE SET "
        "runs = owner_running.runs + 1, started = owner_running.started + excluded.started")
_REMOVE = ("UPDATE owner_running SET runs = owner_running.runs - 1, started = owner_running.started - c.started "
           "FROM ("
           + _COUNTED.format(side="OLD") + ") c WHERE owner_running.owner = OLD.owner "
           f"AND owner_running.shard = OLD.lease_run % {SHARDS}")
_CHANGED = ("OLD.lease_run IS NOT NULL AND NEW.lease_run IS NULL "
            "OR OLD.lease_run IS NULL AND NEW.lease_run IS NOT NULL OR OLD.lease_run <> NEW.lease_run")

SQLITE_TRIGGER = ("CREATE TRIGGER IF NOT EXISTS owner_running_lease AFTER UPDATE OF lease_run ON entries "
                  f"WHEN {_CHANGED} BEGIN {_REMOVE}; {_ADD}; END")
POSTGRESQL_FUNCTION = ("CREATE OR REPLACE FUNCTION owner_running_lease() RETURNS trigger LANGUAGE plpgsql AS $$ "
                       f"BEGIN IF {_CHANGED} THEN IF OLD.lease_run IS NOT NULL THEN {_REMOVE}; END IF; "
                       f"IF NEW.lease_run IS NOT NULL THEN {_ADD}; END IF; END IF; RETURN NULL; END $$")
# WHEN: a claim, which sets lease_run NULL again, calls no function (a function call per claim).
POSTGRESQL_TRIGGER = ("CREATE OR REPLACE TRIGGER owner_running_lease AFTER UPDATE OF lease_run ON entries "
                      "FOR EACH ROW WHEN (OLD.lease_run IS DISTINCT FROM NEW.lease_run) "
                      "EXECUTE FUNCTION owner_running_lease()")
# What is running when the table is made (a queue an older vmjudge made, its daemons at work).
FILL = (f"INSERT INTO owner_running (owner, shard, runs, started) SELECT x.owner, x.lease_run % {SHARDS}, "
        "COUNT(*), SUM(r.started) FROM entries x JOIN stage_runs r ON r.id = x.lease_run "
        f"WHERE x.state = 'running' AND x.batch = 0 AND r.stage IN ({_VM_LIST}) AND r.started IS NOT NULL "
        f"GROUP BY x.owner, x.lease_run % {SHARDS}")


def statements(dialect: Dialect) -> tuple[str, ...]:
    """The table and its trigger, for `dialect`; connection.py runs them (then FILL, when the
    table is new) in the transaction that makes or upgrades the queue's tables."""
    if dialect is POSTGRESQL:
        return TABLE, POSTGRESQL_FUNCTION, POSTGRESQL_TRIGGER
    return TABLE, SQLITE_TRIGGER


# owner -> VM seconds its running stages have run at time ?; one parameter: now.
RUNNING_BY_OWNER = ("SELECT owner, SUM(runs * ? - started) AS used FROM owner_running WHERE runs > 0 "
                    "GROUP BY owner")
