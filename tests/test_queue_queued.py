"""The owners a claim chooses among (queue/queued.py, issue 36), on both backends: each owner's
count of queued stages is kept right by every path that puts a stage into the queue or takes it
out, whoever makes the change; a queue made before gains the counts of what is queued."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from vmjudge.queue import db as db_module
from vmjudge.queue.db import Queue


@pytest.fixture
def queue(queue_location, tmp_path):
    q = Queue(queue_location)
    q.add_challenge("c", tmp_path, "key")
    return q


def add(queue: Queue, where: Path, owner: str) -> int:
    archive = where / f"{owner}-x.zip"
    archive.write_bytes(b"PK")
    return queue.add_entry("c", owner, False, hashlib.sha256(b"PK").hexdigest(), f"{owner}-entry.zip", archive)


def counted(queue: Queue) -> dict[tuple[str, int], int]:
    with queue.database.connect() as db:
        return {(r["owner"], r["batch"]): r["n"] for r in db.execute(
            "SELECT owner, batch, SUM(stages) AS n FROM owner_queued GROUP BY owner, batch "
            "HAVING SUM(stages) != 0").fetchall()}


def queued_now(queue: Queue) -> dict[tuple[str, int], int]:
    """What owner_queued must hold, from the entries themselves (what the claim's walk once found)."""
    with queue.database.connect() as db:
        return {(r["owner"], r["batch"]): r["n"] for r in db.execute(
            "SELECT owner, batch, COUNT(*) AS n FROM entries WHERE state = 'queued' GROUP BY owner, batch").fetchall()}


def test_every_path_into_and_out_of_the_queue_keeps_the_owners_counts(queue, tmp_path):
    ids = {owner: add(queue, tmp_path, owner) for owner in ("ann", "bob", "cid", "dee", "eve")}
    add(queue, tmp_path, "ann")
    assert counted(queue) == queued_now(queue) == {("ann", 0): 2, ("bob", 0): 1, ("cid", 0): 1, ("dee", 0): 1,
                                                   ("eve", 0): 1}

    def start(owner: str) -> db_module.StageRun:
        entry = queue.claim_next(only=ids[owner])
        return queue.start_stage(entry.id, entry.stage, 0)

    runs = {owner: start(owner) for owner in ids}  # claims take them out
    assert counted(queue) == queued_now(queue) == {("ann", 0): 1}
    queue.finish_stage(runs["ann"], "passed", "ok", {}, next_stage="quiz")  # a result: the next stage queued
    queue.infra_failure(runs["bob"], "vm-start", "x", {})  # queued again, waiting out its retry delay
    queue.cancel_stage(runs["cid"])  # the daemon stopped on purpose
    queue.leases.renew(queue.host, -10)  # dee's and eve's leases run out and are queued again
    assert sorted(queue.leases.expire()) == sorted([ids["dee"], ids["eve"]])
    assert counted(queue) == queued_now(queue) == {("ann", 0): 2, ("bob", 0): 1, ("cid", 0): 1, ("dee", 0): 1,
                                                   ("eve", 0): 1}
    start("cid")  # the others wait out their retry delays
    queue.requeue_running()  # a dead daemon's stages
    assert counted(queue) == queued_now(queue)
    run = start("ann")
    queue.finish_stage(run, "failed", "x", {}, reason="quiz-error", outcome="failed")  # the entry ends
    queue.rerun(ids["ann"])  # the organiser's batch work: counted apart
    assert counted(queue)[("ann", 1)] == 1 and counted(queue) == queued_now(queue)
    with queue.database.transaction() as db:  # whoever changes an entry, the counts follow
        db.execute("UPDATE entries SET owner = 'fay' WHERE id = ?", (ids["bob"],))
        db.execute("UPDATE entries SET state = 'parked' WHERE id = ?", (ids["cid"],))
    assert counted(queue) == queued_now(queue)
    assert ("fay", 0) in counted(queue) and ("cid", 0) not in counted(queue)
    with queue.database.connect() as db:  # an owner with nothing queued has no row: a claim reads none
        assert db.execute("SELECT COUNT(*) FROM owner_queued WHERE stages <= 0").fetchone()[0] == 0
        assert db.execute("SELECT COUNT(*) FROM owner_queued WHERE owner = 'bob'").fetchone()[0] == 0


def test_a_queue_made_before_gains_the_counts_of_what_is_queued(queue, queue_location, tmp_path):
    ann, bob = add(queue, tmp_path, "ann"), add(queue, tmp_path, "bob")
    add(queue, tmp_path, "bob")
    queue.start_stage(queue.claim_next(only=ann).id, "prep", 0)
    with queue.database.transaction() as db:  # as a vmjudge before the counts left it
        for trigger in ("owner_queued_insert", "owner_queued_update", "owner_queued_delete"):
            db.execute(f"DROP TRIGGER {trigger}" + (" ON entries" if queue.shared else ""))
        if queue.shared:
            db.execute("DROP FUNCTION owner_queued_change")
        db.execute("DROP TABLE owner_queued")
    again = Queue(queue_location)
    assert counted(again) == queued_now(again) == {("bob", 0): 2}
    assert again.claim_next().id == bob  # the owners are found from the counts
    assert counted(again) == {("bob", 0): 1}  # and the triggers are there to keep them
