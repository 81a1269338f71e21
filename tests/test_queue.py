"""The queue's state machine, on both backends (a real SQLite file, a real PostgreSQL server):
nothing accepted is lost, infrastructure failures are retried and then parked, a dead
daemon's stages are run again."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import tempfile
from pathlib import Path

import psycopg
import pytest

from vmjudge.errors import ChallengeError, VmjudgeError
from vmjudge.queue import db as db_module
from vmjudge.queue.db import Queue
from vmjudge.stages.context import StageOutcome
from vmjudge.supervisor import attempts

from .cli import run_cli


@pytest.fixture
def queue(queue_location, tmp_path):
    q = Queue(queue_location)
    q.add_challenge("c", tmp_path, "key")
    return q


def add(queue, owner="alice"):
    """An entry; its archive a real file, since a shared queue stores its bytes."""
    archive = Path(tempfile.gettempdir()) / f"vmjudge-test-{os.getpid()}-x.zip"
    archive.write_bytes(b"PK")
    return queue.add_entry("c", owner, False, hashlib.sha256(b"PK").hexdigest(), f"{owner}-entry.zip", archive)


def test_entries_are_claimed_in_queue_order(queue):
    first, second = add(queue, "a"), add(queue, "b")
    assert queue.claim_next().id == first
    assert queue.claim_next().id == second
    assert queue.claim_next() is None


def test_a_stage_moves_the_entry_on_and_an_owners_begun_entry_goes_first(queue):
    first, second = add(queue, "a"), add(queue, "a")
    entry = queue.claim_next()
    run = queue.start_stage(entry.id, "prep", 0)
    queue.finish_stage(run, "passed", "ok", {"x": 1}, next_stage="quiz")
    claimed = queue.claim_next()
    assert (claimed.id, claimed.stage) == (first, "quiz")
    assert queue.entry(second).state == "queued"


def test_final_outcome_is_recorded(queue):
    eid = add(queue)
    run = queue.start_stage(queue.claim_next().id, "score", 0)
    queue.finish_stage(run, "scored", "Scores", {}, outcome="scored", scores={"score": 0.5})
    e = queue.entry(eid)
    assert (e.state, e.outcome, e.scores, e.failed_stage) == ("done", "scored", {"score": 0.5}, None)


def test_infrastructure_failures_retry_after_10_s_then_60_s_then_park(queue, monkeypatch):
    """The guides' numbers (docs/organisers.md, docs/participants.md), as literals: 3 attempts, the
    second 10 s after the first failed, the third 60 s after the second."""
    clock = [1000.0]
    monkeypatch.setattr(db_module.time, "time", lambda: clock[0])
    eid = add(queue)
    for attempt, delay in ((1, None), (2, 10.0), (3, 60.0)):
        if delay is not None:
            clock[0] += delay - 0.01
            assert queue.claim_next() is None and queue.waiting()  # still waiting out its delay
            clock[0] += 0.01
        entry = queue.claim_next()
        assert entry is not None and entry.stage == "prep"
        run = queue.start_stage(eid, "prep", 0)
        assert run.attempt == attempt
        requeued = queue.infra_failure(run, "vm-start", "the VM would not start", {})
        assert requeued == (attempt < 3)
    e = queue.entry(eid)
    assert (e.state, e.reason, e.outcome) == ("parked", "vm-start", None)
    clock[0] += 3600
    assert queue.claim_next() is None and not queue.waiting()
    assert [r.status for r in queue.stage_runs(eid)] == ["infra"] * 3


def test_the_challenges_own_fault_holds_the_entry_at_once_never_retried(queue):
    """An evaluation container that fails (ChallengeError) would fail again: no retry costs another VM run,
    the entry is parked for the organiser with the reason, and the participant's stage is not failed."""
    eid = add(queue)
    entry = queue.claim_next()
    run = queue.start_stage(entry.id, "score", 0)

    def evaluation() -> StageOutcome:
        raise ChallengeError("evaluation-no-metrics", "the evaluation wrote no /output/metrics.json.")

    assert attempts.attempt(queue, run, queue.host, attempts.Recorder(None), evaluation) is None
    e = queue.entry(eid)
    assert (e.state, e.reason, e.outcome) == ("parked", "evaluation-no-metrics", None)
    assert [(r.status, r.reason) for r in queue.stage_runs(eid)] == [("infra", "evaluation-no-metrics")]
    assert queue.claim_next() is None and not queue.waiting()
    assert "parked after 1 failures" in queue.events(eid)[-1]["detail"]


def test_stages_left_running_by_a_dead_daemon_are_queued_again(queue):
    eid = add(queue)
    queue.claim_next()
    queue.start_stage(eid, "prep", 0)
    assert queue.requeue_running() == [eid]
    assert queue.entry(eid).state == "queued"
    assert queue.stage_runs(eid)[0].reason == "daemon-stopped"
    assert queue.claim_next().id == eid


def test_every_change_is_in_the_event_log(queue):
    eid = add(queue)
    run = queue.start_stage(queue.claim_next().id, "prep", 0)
    queue.finish_stage(run, "failed", "Missing", {}, reason="missing-component", outcome="failed")
    assert [e["kind"] for e in queue.events(eid)] == ["submitted", "running", "done"]


def test_a_committed_entry_survives_a_new_connection(queue, queue_location):
    eid = add(queue)
    if queue.shared:
        with psycopg.connect(queue_location) as conn:
            assert conn.execute("SELECT id, state FROM entries").fetchall() == [(eid, "queued")]
        return
    rows = sqlite3.connect(queue_location).execute("SELECT id, state FROM entries").fetchall()
    assert rows == [(eid, "queued")]
    assert sqlite3.connect(queue_location).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_unknown_entry_and_challenge_say_what_to_do(queue):
    with pytest.raises(VmjudgeError, match="^there is no entry 99: `vmjudge status` lists the entries.$"):
        queue.entry(99)
    with pytest.raises(VmjudgeError,
                       match="^no challenge named 'x' is registered: run `vmjudge challenge add DIR` first.$"):
        queue.challenge_dir("x")


def test_a_cancelled_stage_is_queued_again_and_not_counted(queue):
    eid = add(queue)
    for _ in range(4):  # more cancellations than the 3 attempts allowed
        queue.claim_next()
        queue.cancel_stage(queue.start_stage(eid, "prep", 0))
    assert queue.entry(eid).state == "queued"
    queue.claim_next()
    assert queue.infra_failure(queue.start_stage(eid, "prep", 0), "vm-start", "x", {})  # first failure


def test_status_lists_what_is_waiting_running_or_parked_and_counts_the_rest(tmp_path, monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(db_module.time, "time", lambda: clock[0])
    queue = Queue(tmp_path / "queue.db")
    queue.add_challenge("c", tmp_path, "key")
    done, running, parked, queued = (add(queue, o) for o in ("dora", "rick", "pam", "quinn"))
    queue.finish_stage(queue.start_stage(queue.claim_next(only=done).id, "prep", 0), "failed", "x", {},
                       reason="setup-error", outcome="failed")
    queue.finish_stage(queue.start_stage(queue.claim_next(only=running).id, "prep", 0), "passed", "ok",
                       {}, next_stage="quiz")
    queue.start_stage(queue.claim_next(only=running).id, "quiz", 0)
    for delay in (0, 10, 60):
        clock[0] += delay
        queue.infra_failure(queue.start_stage(queue.claim_next(only=parked).id, "prep", 0),
                            "vm-start", "the VM would not start", {})
    text = run_cli("status", home=tmp_path).stdout
    assert text == (f"{running:>6}  running  quiz   c                rick\n"
                    f"{parked:>6}  parked   prep   c                pam\n"
                    f"{queued:>6}  queued   prep   c                quinn\n"
                    "3 waiting or running (1 running, 1 parked, 1 queued), 1 done\n")
    doc = json.loads(run_cli("status", "--json", home=tmp_path).stdout)
    assert doc == {"active": [{"id": running, "challenge": "c", "owner": "rick", "state": "running", "stage": "quiz"},
                              {"id": parked, "challenge": "c", "owner": "pam", "state": "parked", "stage": "prep"},
                              {"id": queued, "challenge": "c", "owner": "quinn", "state": "queued", "stage": "prep"}],
                   "unlisted": 0, "counts": {"queued": 1, "running": 1, "done": 1, "parked": 1}, "done": 1,
                   "gpus": [], "hosts": [], "data_disks": {"count": 0, "bytes": 0}}
    # A queue too long to list: the running and parked entries first, then the oldest queued, and
    # the counts say how many more wait (listing 100,000 took half a second and said nothing more).
    later = [add(queue, "quinn") for _ in range(3)]
    queue.start_stage(queue.claim_next(only=later[-1]).id, "prep", 0)  # running, and newer than 3 queued
    text = run_cli("status", "--limit", "3", home=tmp_path).stdout
    assert text.splitlines()[:3] == [f"{running:>6}  running  quiz   c                rick",
                                     f"{parked:>6}  parked   prep   c                pam",
                                     f"{later[-1]:>6}  running  prep   c                quinn"]
    assert text.splitlines()[3:] == ["6 waiting or running (2 running, 1 parked, 3 queued), 1 done",
                                     "3 more not listed: `vmjudge entries --state queued` pages them all, "
                                     "or `vmjudge status --limit N` lists more."]
    doc = json.loads(run_cli("status", "--json", "--limit", "4", home=tmp_path).stdout)
    assert [e["id"] for e in doc["active"]] == [running, parked, queued, later[-1]] and doc["unlisted"] == 2
    assert doc["counts"] == {"queued": 3, "running": 2, "done": 1, "parked": 1}
    assert later[-1] in [e["id"] for e in json.loads(run_cli("status", "--json", home=tmp_path).stdout)["active"]]
