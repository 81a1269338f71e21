"""The queue at scale (issue 36), on both backends: what a claim reads instead of every ready
stage is kept right by every path that starts or ends a run; a queue made before gains it; the
claim walks indexes; SQLite's kept connection is as safe as one per operation."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from vmjudge.queue import db as db_module
from vmjudge.queue.claim import NEW, heads
from vmjudge.queue.db import Queue
from vmjudge.queue.fair_share import USAGE_BY_OWNER, usage_args

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def queue(queue_location, tmp_path):
    q = Queue(queue_location)
    q.add_challenge("c", tmp_path, "key")
    return q


def add(queue: Queue, owner: str = "alice") -> int:
    archive = Path(tempfile.gettempdir()) / f"vmjudge-test-{os.getpid()}-x.zip"
    archive.write_bytes(b"PK")
    return queue.add_entry("c", owner, False, hashlib.sha256(b"PK").hexdigest(), f"{owner}-entry.zip", archive)


def running(queue: Queue) -> dict[str, tuple[int, float]]:
    with queue.database.connect() as db:
        return {r["owner"]: (r["runs"], r["started"]) for r in db.execute(
            "SELECT owner, SUM(runs) AS runs, SUM(started) AS started FROM owner_running GROUP BY owner "
            "HAVING SUM(runs) != 0").fetchall()}


def counted_from_runs(queue: Queue) -> dict[str, tuple[int, float]]:
    """What owner_running must hold, from the runs themselves (the sum the claim once made)."""
    with queue.database.connect() as db:
        rows = db.execute("SELECT x.owner AS owner, COUNT(*) AS n, SUM(r.started) AS s FROM entries x "
                          "JOIN stage_runs r ON r.id = x.lease_run WHERE x.state = 'running' "
                          "AND r.stage IN ('prep', 'quiz', 'exam') AND r.organiser = 0 GROUP BY x.owner").fetchall()
    return {r["owner"]: (r["n"], r["s"]) for r in rows}


def test_every_path_that_ends_a_run_takes_it_out_of_the_owners_running_time(queue, monkeypatch):
    clock = [1_000_000.0]
    monkeypatch.setattr(db_module.time, "time", lambda: clock[0])
    monkeypatch.setattr("vmjudge.queue.leases.time.time", lambda: clock[0])
    ids = {owner: add(queue, owner) for owner in ("ann", "bob", "cid", "dee", "eve")}

    def start(owner: str) -> db_module.StageRun:
        entry = queue.claim_next(only=ids[owner])
        return queue.start_stage(entry.id, entry.stage, 0)

    runs = {owner: start(owner) for owner in ids}
    assert running(queue) == counted_from_runs(queue) == dict.fromkeys(ids, (1, 1000000.0))
    clock[0] += 5
    queue.finish_stage(runs["ann"], "passed", "ok", {}, next_stage="quiz")  # a result
    queue.infra_failure(runs["bob"], "vm-start", "x", {})  # an infrastructure failure
    queue.cancel_stage(runs["cid"])  # the daemon stopped on purpose
    queue.leases.renew(queue.host, -10)  # dee's and eve's leases run out...
    assert sorted(queue.leases.expire()) == sorted([ids["dee"], ids["eve"]])  # ...and another host sees it
    assert running(queue) == counted_from_runs(queue) == {}
    run = start("ann")  # its quiz, running 5 s later
    start("cid")  # bob waits out his retry delay
    queue.requeue_running()  # a dead daemon's stages
    assert running(queue) == counted_from_runs(queue) == {}
    run = start("ann")
    queue.finish_stage(run, "passed", "ok", {}, next_stage="exam")
    run = start("ann")
    queue.finish_stage(run, "passed", "ok", {}, next_stage="score")
    queue.finish_stage(start("ann"), "scored", "ok", {}, outcome="scored", scores={"s": 1.0})  # score: not a VM
    queue.rerun(ids["ann"])  # batch work: the organiser's, never the owner's
    start("ann")
    clock[0] += 7
    start("cid")
    assert running(queue) == counted_from_runs(queue) == {"cid": (1, 1_000_012.0)}
    with queue.database.connect() as db:
        weighed = {r["owner"]: r["used"] for r in db.execute(USAGE_BY_OWNER,
                                                               usage_args(clock[0] + 3, 86400)).fetchall()}
    assert weighed["cid"] == 3 and weighed["ann"] == 5 and "bob" not in weighed  # ann: her charged prep


def test_a_queue_made_before_gains_the_index_and_the_running_table_with_what_runs(queue, queue_location):
    stay, gone = add(queue, "ann"), add(queue, "bob")
    run = queue.start_stage(queue.claim_next(only=stay).id, "prep", 0)
    with queue.database.transaction() as db:  # as a vmjudge before issue 36 left it
        db.execute("DROP TRIGGER owner_running_lease" + (" ON entries" if queue.shared else ""))
        if queue.shared:
            db.execute("DROP FUNCTION owner_running_lease")
        db.execute("DROP TABLE owner_running")
        db.execute("DROP INDEX entries_ready")
    again = Queue(queue_location)
    with again.database.connect() as db:
        if again.shared:
            index = db.execute("SELECT indexname FROM pg_indexes WHERE indexname = 'entries_ready'").fetchone()
        else:
            index = db.execute("SELECT name FROM sqlite_master WHERE name = 'entries_ready'").fetchone()
    assert index is not None
    assert running(again) == {"ann": (1, run.started)}  # the run that was going on is counted
    assert again.claim_next().id == gone  # bob has used nothing; ann's run counts
    again.finish_stage(run, "failed", "x", {}, reason="setup-error", outcome="failed")
    assert running(again) == {}  # and the trigger is there to take it out


@pytest.mark.parametrize("least", [True, False])
def test_the_claim_walks_the_index_and_sorts_only_owners(tmp_path, least):
    """SQLite's plan of the owners' heads: the entries are only searched by index (a seek per
    owner), never scanned; the only sort is of the owners."""
    queue = Queue(tmp_path / "queue.db")
    with queue.database.connect() as db:
        plan = [r[3] for r in db.execute("EXPLAIN QUERY PLAN " + heads("", USAGE_BY_OWNER, least),
                                         (0, 0, 0.0, 0, 0.0)).fetchall()]
    entries = [step for step in plan if " e " in f" {step} " or " n " in f" {step} " or "entries" in step]
    assert entries and all(step.startswith("SEARCH") for step in entries), plan
    assert any("entries_ready" in step for step in entries), plan
    assert NEW in heads("", USAGE_BY_OWNER, least)


def test_sqlite_keeps_one_connection_per_thread_with_the_same_settings(tmp_path):
    queue = Queue(tmp_path / "queue.db")
    with queue.database.connect() as a, queue.database.connect() as b:
        assert a.raw is b.raw
        assert a.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert a.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL: the WAL is synced at every commit
        assert a.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    other: list[object] = []

    def elsewhere() -> None:
        with queue.database.connect() as db:
            other.append(db.raw)

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join()
    assert other and other[0] is not a.raw


CRASH = """
import hashlib, os, signal, sys
from pathlib import Path
from vmjudge.queue.db import Queue
queue = Queue(Path(sys.argv[1]))
archive = Path(sys.argv[1]).with_name("x.zip")
archive.write_bytes(b"PK")
eid = queue.add_entry("c", "ann", False, hashlib.sha256(b"PK").hexdigest(), "a.zip", archive)
queue.start_stage(queue.claim_next().id, "prep", 0)
print(eid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # no close, no checkpoint: only what the commits synced
"""


def test_a_kept_sqlite_connection_loses_no_commit_when_its_process_is_killed(tmp_path):
    path = tmp_path / "queue.db"
    made = Queue(path)
    made.add_challenge("c", tmp_path, "key")
    del made  # its connection closed: the killed process's is the only one
    proc = subprocess.run([sys.executable, "-c", CRASH, str(path)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    eid = int(proc.stdout)
    assert Path(str(path) + "-wal").exists()  # not checkpointed: the commits are in the WAL left behind
    rows = sqlite3.connect(path).execute("SELECT state, lease_run FROM entries WHERE id = ?", (eid,)).fetchall()
    assert len(rows) == 1 and rows[0][0] == "running" and rows[0][1] is not None
    assert [r.stage for r in Queue(path).stage_runs(eid)] == ["prep"]


SYNCS = """
import hashlib, sys
from pathlib import Path
from vmjudge.queue.db import Queue
queue = Queue(Path(sys.argv[1]))
archive = Path(sys.argv[1]).with_name("x.zip")
archive.write_bytes(b"PK")
print("go", flush=True)
for _ in range(20):
    eid = queue.add_entry("c", "ann", False, hashlib.sha256(b"PK").hexdigest(), "a.zip", archive)
    queue.start_stage(queue.claim_next().id, "prep", 0)
"""


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace counts the syncs")
def test_a_kept_sqlite_connection_syncs_at_every_commit(tmp_path):
    """Measured, not assumed: 60 commits through one kept connection (20 entries, each added,
    claimed and started), and the process's fdatasync/fsync calls counted by strace."""
    path = tmp_path / "queue.db"
    made = Queue(path)
    made.add_challenge("c", tmp_path, "key")
    del made
    trace = tmp_path / "trace"
    proc = subprocess.run(["strace", "-f", "-qq", "-e", "trace=fsync,fdatasync", "-o", str(trace), sys.executable,
                           "-c", SYNCS, str(path)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr
    syncs = [line for line in trace.read_text().splitlines() if "sync(" in line]
    assert len(syncs) >= 60, len(syncs)


def test_a_moved_sqlite_file_is_noticed_by_the_kept_connection(tmp_path):
    """The queue is the file at the path, as when each operation opened it: a home moved away
    and something else put there is not the queue the kept connection has open."""
    queue = Queue(tmp_path / "queue.db")
    queue.add_challenge("c", tmp_path, "key")
    (tmp_path / "moved").mkdir()
    for path in tmp_path.glob("queue.db*"):
        path.rename(tmp_path / "moved" / path.name)
    (tmp_path / "queue.db").mkdir()
    with pytest.raises(db_module.VmjudgeError, match="cannot be used now"):
        queue.challenges()
    (tmp_path / "queue.db").rmdir()
    for path in (tmp_path / "moved").iterdir():
        path.rename(tmp_path / path.name)
    assert [c["name"] for c in queue.challenges()] == ["c"]
