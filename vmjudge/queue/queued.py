"""Each owner's queued stages, counted by the database itself: the owners a claim chooses among.

A claim chooses among the owners with a stage queued (claim.py). It found them by a walk of the
index entries_ready, a seek from one owner to the next, which was most of a PostgreSQL claim's
time with 97 owners (issue 36: a seek and a text comparison in the owners' collation for each,
whatever else the claim did). So the queue keeps, per owner and kind of work (batch: the
participant's or the organiser's), how many of its stages are queued: the owners with one are
the rows counting more than 0, read in one scan of a small table.

One row per owner and kind of work, deleted when it counts none, so that a claim reads only the
owners with a stage queued. Claimers taking the same owner's stages at once (fair share sends them
all to the least-used owner) take that row's lock in turn, each from the end of its claim's
statement to its commit, with no round trip between (one_statement.py). Kept in 8 rows per owner,
as owner_running is (running.py), the counts cost each claim more than those waits: the owners
found among 776 rows with a sort, 0.2 ms more of the server's CPU (bench/queue_bench.py, 4
claimers: 918 claims/s against 965 and 972 with one row, the machine busy).

Triggers on entries keep the counts in the very transaction that changes an entry's state, owner
or batch, whichever code does it (an admission, a claim, a result, a retry, a requeue, a rerun, an
expired lease, a test's own UPDATE), and the database fires them only when the entry comes into
or leaves the queue (or moves between owners or batches while queued). A queue made before this
table gains it with the stages now queued counted.
"""

from __future__ import annotations

from .dialect import POSTGRESQL, Dialect

NAME = "owner_queued"
TRIGGERS = ("owner_queued_insert", "owner_queued_update", "owner_queued_delete")
TABLE = ("CREATE TABLE IF NOT EXISTS owner_queued (owner TEXT NOT NULL, batch INTEGER NOT NULL, "
         "stages INTEGER NOT NULL, PRIMARY KEY (batch, owner))")
_ADD = ("INSERT INTO owner_queued (owner, batch, stages) SELECT NEW.owner, NEW.batch, 1 WHERE NEW.state = 'queued' "
        "ON CONFLICT (owner, batch) DO UPDATE SET stages = owner_queued.stages + 1")
_REMOVE = ("UPDATE owner_queued SET stages = stages - 1 WHERE OLD.state = 'queued' AND owner = OLD.owner "
           "AND batch = OLD.batch")
_EMPTIED = "DELETE FROM owner_queued WHERE owner = OLD.owner AND batch = OLD.batch AND stages = 0"
# An UPDATE of entries that changes what is counted (and only then does a trigger fire).
_MOVED = ("(OLD.state = 'queued') <> (NEW.state = 'queued') "
          "OR NEW.state = 'queued' AND (OLD.owner <> NEW.owner OR OLD.batch <> NEW.batch)")

SQLITE_TRIGGERS = (
    f"CREATE TRIGGER IF NOT EXISTS owner_queued_insert AFTER INSERT ON entries WHEN NEW.state = 'queued' "
    f"BEGIN {_ADD}; END",
    f"CREATE TRIGGER IF NOT EXISTS owner_queued_update AFTER UPDATE OF state, owner, batch ON entries WHEN {_MOVED} "
    f"BEGIN {_REMOVE}; {_EMPTIED}; {_ADD}; END",
    f"CREATE TRIGGER IF NOT EXISTS owner_queued_delete AFTER DELETE ON entries WHEN OLD.state = 'queued' "
    f"BEGIN {_REMOVE}; {_EMPTIED}; END",
)
# The row emptied is deleted by the transaction holding its lock: an ADD waiting for that lock then
# inserts the row again (INSERT ... ON CONFLICT tries again when the row it conflicted with is gone).
POSTGRESQL_FUNCTION = ("CREATE OR REPLACE FUNCTION owner_queued_change() RETURNS trigger LANGUAGE plpgsql AS $$ "
                       "DECLARE n INTEGER; BEGIN "
                       f"IF TG_OP <> 'INSERT' THEN {_REMOVE} RETURNING stages INTO n; "
                       f"IF n = 0 THEN {_EMPTIED}; END IF; END IF; "
                       f"IF TG_OP <> 'DELETE' THEN {_ADD}; END IF; RETURN NULL; END $$")
POSTGRESQL_TRIGGERS = (
    "CREATE OR REPLACE TRIGGER owner_queued_insert AFTER INSERT ON entries FOR EACH ROW "
    "WHEN (NEW.state = 'queued') EXECUTE FUNCTION owner_queued_change()",
    f"CREATE OR REPLACE TRIGGER owner_queued_update AFTER UPDATE OF state, owner, batch ON entries FOR EACH ROW "
    f"WHEN ({_MOVED}) EXECUTE FUNCTION owner_queued_change()",
    "CREATE OR REPLACE TRIGGER owner_queued_delete AFTER DELETE ON entries FOR EACH ROW "
    "WHEN (OLD.state = 'queued') EXECUTE FUNCTION owner_queued_change()",
)
# What is queued when the table is made (a queue an older vmjudge made).
FILL = ("INSERT INTO owner_queued (owner, batch, stages) SELECT owner, batch, COUNT(*) FROM entries "
        "WHERE state = 'queued' GROUP BY owner, batch")


def statements(dialect: Dialect) -> tuple[str, ...]:
    """The table and its triggers, for `dialect`; connection.py runs them (then FILL, when the
    table is new) in the transaction that makes or upgrades the queue's tables."""
    if dialect is POSTGRESQL:
        return TABLE, POSTGRESQL_FUNCTION, *POSTGRESQL_TRIGGERS
    return TABLE, *SQLITE_TRIGGERS


# The owners with a stage queued as one kind of work; one parameter: batch (0 or 1).
QUEUED_OWNERS = "SELECT owner FROM owner_queued WHERE batch = ? AND stages > 0"
