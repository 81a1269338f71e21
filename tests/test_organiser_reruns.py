"""The organiser's work costs no participant anything (issue 30): stage runs of entries the
organiser queued again (`rescore --rerun-stages`, History.rerun) record the VM time they used,
but neither spend the owner's VM-time budget nor push the owner down the fair-share order,
while they run or once they end; `vmjudge usage` shows that time apart. On both backends, with
stages taken through the queue's own API on a clock moved by hand; no VM is started."""

from __future__ import annotations

import json

import pytest

from vmjudge.errors import EntryError
from vmjudge.queue.db import Queue

from .cli import run_cli
from .test_budgets import Board


def first_claimed(queue: Queue) -> int:
    """The entry a free slot takes now; the claim is then given back as a stopping daemon gives
    it back (cancelled, uncounted), so the queue's order is as it was."""
    entry = queue.claim_next()
    assert entry is not None
    queue.cancel_stage(queue.start_stage(entry.id, entry.stage, 1))
    return entry.id


def test_the_organisers_reruns_spend_neither_the_owners_budget_nor_their_turn(tmp_path, queue_location):
    board = Board(tmp_path, queue_location)  # a budget of 36 s
    queue = board.queue
    a1 = board.admit("alice").entry_id
    b1 = board.admit("bob").entry_id
    for stage, seconds in (("prep", 15), ("quiz", 10), ("exam", 5)):
        board.run(a1, stage, seconds)
    board.run(a1, "score", 0, status="scored")
    board.run(b1, "prep", 33, status="failed")
    assert queue.owner_usage("bud", "alice", False).vm_seconds == 30  # 6 s short of the budget
    a2 = board.admit("alice").entry_id
    board.admit("bob")  # bob's second entry: a slot takes it first whenever bob has used less than alice
    with board.clock():
        assert first_claimed(queue) == a2  # alice has used 30 s, bob 33 s

        queue.rerun(a1)  # the organiser's batch work: 30 s of VM time again, and more
        assert queue.claim_next(only=a1).stage == "prep"
        run = queue.start_stage(a1, "prep", 0)
        board.now += 15
        assert first_claimed(queue) == a2  # the batch stage running for 15 s is not alice's
        queue.finish_stage(run, "passed", "ok", {}, next_stage="quiz")
    for stage, seconds in (("quiz", 10), ("exam", 25)):
        board.run(a1, stage, seconds)
    board.run(a1, "score", 0, status="scored")

    assert board.admit("alice").vm_used == 30  # accepted: with the re-runs charged, 80 s is over the budget
    with board.clock():
        assert first_claimed(queue) == a2  # alice is still ahead of bob
    reruns = [r for r in queue.stage_runs(a1) if r.evaluation == 2]
    assert [(r.stage, r.vm_seconds, r.organiser) for r in reruns] == [  # their time is recorded all the same
        ("prep", 15, True), ("quiz", 10, True), ("exam", 25, True), ("score", None, True)]
    assert not any(r.organiser for r in queue.stage_runs(a1) if r.evaluation == 1)

    doc = json.loads(run_cli("usage", "bud", "--owner", "alice", "--json", home=board.home).stdout)
    assert doc["owners"] == [{"owner": "alice", "late": False, "entries": 3, "scored": 1, "vm_hours_used": 0.0083,
                              "vm_hours_left": 0.0017, "organiser_vm_hours": 0.0139}]
    text = run_cli("usage", "bud", "--owner", "alice", home=board.home).stdout
    assert text == ("alice: 3 entries, 1 scored, 0.01 h (30 s) of VM time used, 0.00 h (6 s) left of 0.01 h; "
                    "the organiser's re-runs took 0.01 h (50 s) more, never charged\n")


def test_the_owners_own_time_still_spends_the_budget_beside_the_reruns(tmp_path, queue_location):
    """The organiser's runs are set apart by run, not by entry: an owner's own entry runs while
    the organiser re-runs another, and only the owner's is charged."""
    board = Board(tmp_path, queue_location)
    old = board.admit("alice").entry_id
    board.run(old, "prep", 1, status="failed")
    queue = board.queue
    queue.rerun(old)
    new = board.admit("alice").entry_id
    with board.clock():
        assert queue.claim_next(only=old).id == old
        batch = queue.start_stage(old, "prep", 0)
        assert queue.claim_next(only=new).id == new
        own = queue.start_stage(new, "prep", 1)
        board.now += 40
        queue.finish_stage(own, "failed", "x", {}, outcome="failed", reason="setup-error")
        queue.finish_stage(batch, "failed", "x", {}, outcome="failed", reason="setup-error")
    assert [(r.vm_seconds, r.organiser) for r in queue.stage_runs(old)] == [(1, False), (40, True)]
    assert queue.owner_usage("bud", "alice", False).vm_seconds == 41
    with pytest.raises(EntryError, match="alice has used the 0.01 h of VM time allowed for bud"):
        board.admit("alice")


def test_a_queue_made_before_gains_the_organiser_column_and_the_guides_update_frees_old_reruns(
        tmp_path, queue_location):
    """A home made before the column: its runs become the owner's, as they were charged then;
    the participants' guide's one UPDATE takes the re-runs among them off the owner's budget."""
    board = Board(tmp_path, queue_location)
    eid = board.admit("alice").entry_id
    board.run(eid, "prep", 12, status="failed")
    board.queue.rerun(eid)
    board.run(eid, "prep", 20, status="failed")
    with board.queue.database.transaction() as db:
        db.execute("ALTER TABLE stage_runs DROP COLUMN organiser")
    queue = Queue(queue_location if isinstance(queue_location, str) else board.home / "queue.db")
    assert [(r.vm_seconds, r.organiser) for r in queue.stage_runs(eid)] == [(12, False), (20, False)]
    assert queue.owner_usage("bud", "alice", False).vm_seconds == 32
    with queue.database.transaction() as db:
        db.execute("UPDATE stage_runs SET organiser = 1 WHERE evaluation > 1")
    assert queue.owner_usage("bud", "alice", False).vm_seconds == 12
