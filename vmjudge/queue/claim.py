"""The claim's SQL: fair share's choice (fair_share.py) at a cost that does not grow with the
number of ready stages.

Sorting every ready stage by its owner's use at each claim made a claim's cost grow with the
queue (issue 36: 82 claims/s on SQLite with 10,000 ready, and a queue of 100,000 never drained
in the bench's 15 minutes). The order is (batch, owner's use, begun before new, oldest), and
within one owner and one kind of work (participant's or batch) it is the index's own order. So
a claim looks at owners, not stages:
1. the owners with a stage queued as this kind of work, from the counts the database keeps per
   owner (owner_queued: queued.py), a row per owner; a walk of the index entries_ready from one
   owner to the next, a seek per owner, cost a PostgreSQL claim more than all the rest;
2. their use, read from what the queue keeps per owner (hours in owner_usage, running stages in
   owner_running: running.py), a row per owner too;
3. the heads of those who used the least: each one's first stage in (begun before new, oldest)
   order that this slot may run (not waiting out a retry, of a kind this slot takes, on this
   host's disk...), by the same index, so one seek when nothing is held back. Only when none of
   them has one (or, on PostgreSQL, other hosts hold all they have) are every owner's heads
   looked for, in fair order, the owners with none passed over.
Then the first head is claimed in the same transaction; nearly always all of it is one statement
(take_first; on PostgreSQL with the claim's event, take_first_logged, run outside a transaction:
one_statement.py). On PostgreSQL the claim's UPDATE takes the owner's head again with FOR UPDATE SKIP
LOCKED, so hosts claiming at once each get another stage (the next of the same owner, or the next
owner's when that owner has none left unlocked).

What still grows: a row read per owner with a stage queued, and an owner's head is found past that
owner's stages this slot may not take (GPU stages for a CPU slot, stages waiting out a retry,
stages of a challenge this host lacks), which the index cannot tell from the others.

Participants' work comes first: the organiser's batch is looked at only when no participant's
stage can be taken.
"""

from __future__ import annotations

from ..pipeline import FIRST
from .queued import QUEUED_OWNERS

# Begun before new: false (0) sorts first on both databases. Written as the index entries_ready
# writes it (made with the queue's tables: schema.LATER_INDEXES), so the planner walks that index
# instead of sorting.
NEW = f"(e.stage = '{FIRST}')"
INDEX = f"CREATE INDEX IF NOT EXISTS entries_ready ON entries(batch, owner, (stage = '{FIRST}'), id) " \
        "WHERE state = 'queued'"


# An owner's head as one number that sorts as (begun before new, oldest): a begun stage's id less
# 2**62, a new one's id (ids stay far below 2**62). One number, so that one seek per owner gives
# both, and the claim need not read the head's row again to sort.
_KEY = f"e.id - CASE WHEN {NEW} THEN 0 ELSE 4611686018427387904 END"


def _owners(usage: str) -> str:
    """The CTEs o (the owners with a stage queued as one kind of work, from the counts the
    database keeps: queued.py) and w (each with its use). Parameters: batch, usage's."""
    return (f"WITH o(owner) AS ({QUEUED_OWNERS}), "
            f"w(owner, used) AS (SELECT o.owner, COALESCE(u.used, 0) FROM o LEFT JOIN ({usage}) u "
            "ON u.owner = o.owner)")


def _head(where: str, owner: str) -> str:
    """An owner's head's key (NULL: nothing this slot may run). Parameters: batch, now, where's."""
    return (f"(SELECT {_KEY} FROM entries e JOIN challenges c ON c.name = e.challenge WHERE e.state = 'queued' "
            f"AND e.batch = ? AND e.owner = {owner} AND e.not_before <= ?" + where + f" ORDER BY {NEW}, e.id LIMIT 1)")


def heads(where: str, usage: str, least: bool) -> str:
    """The owners with a stage queued as one kind of work (a batch value), in fair order, each
    with its head's key (NULL: none this slot may run): the claim tries them in turn. `least`:
    only the owners who used the least, so that the heads of the others are not looked for.
    `where`: the slot's and host's conditions on entries e joined with challenges c; `usage`:
    fair_share.USAGE_BY_OWNER. Parameters: batch, usage's, batch, now, where's."""
    return (_owners(usage) + f" SELECT w.owner AS owner, {_head(where, 'w.owner')} AS head FROM w"
            + (" WHERE w.used = (SELECT MIN(used) FROM w)" if least else "") + " ORDER BY w.used, head")


def take_first(where: str, usage: str, skip_locked: str) -> str:
    """The claim as one statement, as it nearly always goes: the first head among the owners who
    used the least, taken (on PostgreSQL, past the rows other claims hold). Nothing when none of
    them has a stage this slot may take now, or other hosts hold every one: the claim then tries
    every owner's head in turn (heads, take). Parameters: batch, usage's, batch, now, where's,
    host, lease until, batch, now, where's."""
    return _picked(where, usage) + _take_picked(where, skip_locked)


def take_first_logged(where: str, usage: str, skip_locked: str) -> str:
    """take_first and the claim's event ("running", "<stage> by <host>") as one statement, so
    that on PostgreSQL the claim is one statement in a transaction of its own: one round trip,
    where BEGIN, the claim, the event and COMMIT took four. Parameters: take_first's, then the
    event's time and the host. (PostgreSQL only: SQLite has no INSERT within WITH.)"""
    return (_picked(where, usage) + ", claimed AS (" + _take_picked(where, skip_locked) + "), "
            "logged AS (INSERT INTO events (entry_id, at, kind, detail) SELECT id, ?, 'running', "
            "stage || ' by ' || ? FROM claimed) SELECT * FROM claimed")


def _picked(where: str, usage: str) -> str:
    """The CTEs of take_first up to pick (the owner whose head is taken). h is MATERIALIZED: else
    PostgreSQL writes its head into pick twice, for the filter and for the order, a seek each."""
    return (_owners(usage) + ", h(owner, used, head) AS MATERIALIZED (SELECT w.owner, w.used, "
            f"{_head(where, 'w.owner')} FROM w "
            "WHERE w.used = (SELECT MIN(used) FROM w)), "
            "pick(owner) AS (SELECT owner FROM h WHERE head IS NOT NULL ORDER BY used, head LIMIT 1) ")


def _take_picked(where: str, skip_locked: str) -> str:
    return ("UPDATE entries SET state = 'running', lease_owner = ?, lease_run = NULL, lease_until = ? "
            "WHERE id = (SELECT e.id FROM entries e JOIN challenges c ON c.name = e.challenge "
            "WHERE e.state = 'queued' AND e.batch = ? AND e.owner = (SELECT owner FROM pick) AND e.not_before <= ?"
            + where + f" ORDER BY {NEW}, e.id LIMIT 1{skip_locked}) RETURNING *")


def take(where: str, skip_locked: str) -> str:
    """The claim of an owner's head, found again by the index (on PostgreSQL past the rows other
    claims hold). Parameters: host, lease until, batch, owner, now, where's."""
    return ("UPDATE entries SET state = 'running', lease_owner = ?, lease_run = NULL, lease_until = ? "
            "WHERE id = (SELECT e.id FROM entries e JOIN challenges c ON c.name = e.challenge "
            "WHERE e.state = 'queued' AND e.batch = ? AND e.owner = ? AND e.not_before <= ?" + where
            + f" ORDER BY {NEW}, e.id LIMIT 1{skip_locked}) RETURNING *")


def take_one(where: str, skip_locked: str) -> str:
    """The claim of one given entry (`vmjudge run`, the tests' `only`): no order to keep.
    Parameters: host, lease until, the entry's id, now, where's."""
    return ("UPDATE entries SET state = 'running', lease_owner = ?, lease_run = NULL, lease_until = ? "
            "WHERE id = (SELECT e.id FROM entries e JOIN challenges c ON c.name = e.challenge "
            "WHERE e.id = ? AND e.state = 'queued' AND e.not_before <= ?" + where + f"{skip_locked}) RETURNING *")
