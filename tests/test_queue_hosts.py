"""Several hosts on one queue, through the queue's own API on both backends (SQLite, and a real
PostgreSQL server): claims are leases, a host that stops renewing them loses them, a host
presumed dead that comes back records nothing stale, home disks keep stages 2 and 3 on their
host until it is gone, and archives and results travel in the database."""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path

import pytest

from vmjudge.errors import VmjudgeError
from vmjudge.queue import db as db_module
from vmjudge.queue.connection import redacted
from vmjudge.queue.db import Queue, StaleClaim


class Clock:
    """time.time() for the queue, moved by hand: leases and grace periods without waiting."""

    def __init__(self, monkeypatch):
        self.now = time.time()
        monkeypatch.setattr(db_module.time, "time", lambda: self.now)


def hosts(location, tmp_path, *names, lease=60.0):
    queues = [Queue(location, host=name, lease=lease) for name in names]
    queues[0].add_challenge("c", tmp_path, "key")
    return queues


def add(queue, tmp_path, owner="alice", data=b"PK"):
    archive = tmp_path / f"{owner}-{hashlib.sha256(data).hexdigest()[:8]}-entry.zip"
    archive.write_bytes(data)
    return queue.add_entry("c", owner, False, hashlib.sha256(data).hexdigest(), archive.name, archive)


def test_hosts_claiming_at_once_never_get_the_same_stage(queue_location, tmp_path):
    queues = hosts(queue_location, tmp_path, "a", "b", "c", "d")
    ids = {add(queues[0], tmp_path, data=str(i).encode()) for i in range(40)}
    claimed: list[int] = []
    failures: list[Exception] = []  # a thread's exception is otherwise only a warning
    lock = threading.Lock()

    def claimer(queue):
        try:
            while (entry := queue.claim_next()) is not None:
                queue.start_stage(entry.id, "prep", 0)  # StaleClaim if another host has it too
                with lock:
                    claimed.append(entry.id)
        except Exception as exc:  # noqa: BLE001 - every claimer failure must reach the assert below
            with lock:
                failures.append(exc)

    threads = [threading.Thread(target=claimer, args=(q,)) for q in queues]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert sorted(claimed) == sorted(ids)  # every one, once
    assert {r.host for e in ids for r in queues[0].stage_runs(e)} <= {"a", "b", "c", "d"}


def test_a_lapsed_lease_is_requeued_and_the_late_host_records_nothing(queue_location, tmp_path, monkeypatch):
    clock = Clock(monkeypatch)
    a, b = hosts(queue_location, tmp_path, "a", "b", lease=30)
    eid = add(a, tmp_path)
    assert a.claim_next().id == eid
    stale = a.start_stage(eid, "prep", 0)
    clock.now += 29
    assert b.leases.expire() == [] and b.claim_next() is None
    clock.now += 2  # host a stopped renewing 31 s ago
    assert b.leases.expire() == [eid]
    runs = b.stage_runs(eid)
    assert [(r.status, r.reason) for r in runs] == [("infra", "host-lost")]
    assert "the host a running this stage stopped renewing its claim" in runs[0].message
    clock.now += 10  # the retry's delay
    assert b.claim_next().id == eid
    fresh = b.start_stage(eid, "prep", 0)
    with pytest.raises(StaleClaim, match="no longer holds the entry"):
        a.finish_stage(stale, "passed", "ok", {}, next_stage="quiz")
    with pytest.raises(StaleClaim):
        a.infra_failure(stale, "vm-start", "x", {})
    b.finish_stage(fresh, "failed", "setup.sh failed", {}, reason="setup-error", outcome="failed")
    with pytest.raises(StaleClaim):
        a.finish_stage(stale, "scored", "ok", {}, outcome="scored", scores={"s": 1.0})
    entry = b.entry(eid)
    assert (entry.state, entry.outcome, entry.scores) == ("done", "failed", None)
    assert [(r.attempt, r.host, r.status) for r in b.stage_runs(eid)] == [(1, "a", "infra"), (2, "b", "failed")]


def test_a_heartbeat_keeps_a_long_stage_claimed(queue_location, tmp_path, monkeypatch):
    clock = Clock(monkeypatch)
    a, b = hosts(queue_location, tmp_path, "a", "b", lease=30)
    eid = add(a, tmp_path)
    a.start_stage(a.claim_next().id, "prep", 0)
    for _ in range(10):  # five minutes of a stage, renewed every 25 s
        clock.now += 25
        a.leases.renew("a", 30)
        assert b.leases.expire() == []
    assert a.entry(eid).state == "running"


def test_a_claim_lost_before_its_stage_started_is_refused(queue_location, tmp_path, monkeypatch):
    clock = Clock(monkeypatch)
    a, b = hosts(queue_location, tmp_path, "a", "b", lease=30)
    eid = add(a, tmp_path)
    a.claim_next()
    clock.now += 31
    assert b.leases.expire() == [eid]
    with pytest.raises(StaleClaim, match="was lost before its prep stage started"):
        a.start_stage(eid, "prep", 0)


def test_a_host_that_never_comes_back_loses_its_home_disks_after_the_grace(pg_url, tmp_path, monkeypatch):
    """With several hosts, stages 2 and 3 wait for the host that ran prep; once it has been gone
    for the grace period, the entry starts again from stage 1 on another host."""
    clock = Clock(monkeypatch)
    a, b = hosts(pg_url, tmp_path, "a", "b", lease=30)
    for q in (a, b):
        q.hosts.register(q.host, "m-" + q.host, 1, 1, 0, 30, alive=lambda pid: False)
    eid = add(a, tmp_path)
    a.finish_stage(a.start_stage(a.claim_next().id, "prep", 0), "passed", "ok", {}, next_stage="quiz")
    assert b.claim_next() is None and not b.waiting()  # a holds the home disk
    clock.now += 300
    b.hosts.heartbeat("b", 0)
    assert b.leases.restart_lost_homes(grace=600) == []
    clock.now += 301
    assert b.leases.restart_lost_homes(grace=600) == [eid]
    entry = b.claim_next()
    assert (entry.id, entry.stage) == (eid, "prep")
    assert "the host a that holds its home disk for stage quiz has been gone" in b.events(eid)[-2]["detail"]


def test_with_one_sqlite_host_the_home_disk_never_holds_an_entry_back(tmp_path):
    a, b = hosts(tmp_path / "queue.db", tmp_path, "a", "b")
    eid = add(a, tmp_path)
    a.finish_stage(a.start_stage(a.claim_next().id, "prep", 0), "passed", "ok", {}, next_stage="quiz")
    assert b.claim_next().id == eid  # one home: every daemon of it has the disk


def test_a_second_daemon_under_a_live_hosts_name_is_refused(queue_location, tmp_path, monkeypatch):
    clock = Clock(monkeypatch)
    (a,) = hosts(queue_location, tmp_path, "a")
    a.hosts.register("a", "machine-1", 100, 2, 0, 30, alive=lambda pid: True)
    with pytest.raises(VmjudgeError, match="another vmjudge daemon is running as host 'a' .*give each host its own"):
        a.hosts.register("a", "machine-2", 200, 2, 0, 30, alive=lambda pid: False)
    # on the same machine, a dead pid's row is taken over (a daemon killed and restarted)
    a.hosts.register("a", "machine-1", 300, 2, 0, 30, alive=lambda pid: False)
    [row] = a.hosts.all()
    assert (row.pid, row.state(30)) == (300, "up")
    clock.now += 31
    assert a.hosts.all()[0].state(30) == "down"
    a.hosts.register("a", "machine-2", 400, 2, 0, 30, alive=lambda pid: True)  # silent for a lease: gone
    a.hosts.stop("a")
    assert a.hosts.all()[0].state(30) == "stopped"


def test_an_archive_travels_in_the_database_part_by_part_and_is_checked(pg_url, tmp_path):
    a, b = hosts(pg_url, tmp_path, "a", "b")
    data = bytes(range(256)) * 9000  # 2.2 MiB: three parts
    eid = add(a, tmp_path, data=data)
    entry = b.entry(eid)
    there = tmp_path / "b-spool"
    there.mkdir()
    copy = b.blobs.fetch(entry.archive_sha256, there / "copy.zip")
    assert copy.read_bytes() == data and copy.stat().st_mode & 0o777 == 0o600
    with b.database.transaction() as db:
        db.execute("UPDATE blob_parts SET data = ? WHERE sha256 = ? AND part = 1", (b"x", entry.archive_sha256))
    with pytest.raises(VmjudgeError, match="is damaged"):
        b.blobs.fetch(entry.archive_sha256, there / "again.zip")
    assert sorted(p.name for p in there.iterdir()) == ["copy.zip"]  # nothing partial left
    with pytest.raises(VmjudgeError, match="has no blob"):
        b.blobs.fetch("ab" * 32, there / "none.zip")


def test_a_queue_made_by_an_older_vmjudge_gains_the_new_columns_and_tables(queue_location):
    queue = Queue(queue_location)
    with queue.database.transaction() as db:
        db.execute("ALTER TABLE entries DROP COLUMN lease_until")
        db.execute("DROP TABLE hosts")
    queue = Queue(queue_location)
    eid_columns = "SELECT lease_until FROM entries"
    with queue.database.connect() as db:
        assert db.execute(eid_columns).fetchall() == [] and db.execute("SELECT * FROM hosts").fetchall() == []


def test_an_unreachable_postgresql_is_one_sentence(tmp_path):
    with pytest.raises(VmjudgeError, match=r"cannot be used now .*start PostgreSQL, or fix \[queue\] url"):
        Queue(f"postgresql:///vmjudge?host={tmp_path}")


@pytest.mark.parametrize("url, shown", [
    ("postgresql://judge:s3cret@db.example:5432/vmjudge", "postgresql://judge:***@db.example:5432/vmjudge"),
    ("postgresql://judge@db.example/vmjudge?password=s3cret&sslmode=require",
     "postgresql://judge@db.example/vmjudge?password=***&sslmode=require"),
    ("postgresql:///vmjudge?sslmode=require&password=s3cret", "postgresql:///vmjudge?sslmode=require&password=***"),
    ("postgresql://judge:s3cret@db.example/vmjudge?password=s3cret", "postgresql://judge:***@db.example/vmjudge?password=***"),
    ("postgresql://judge@db.example:5432/vmjudge?host=/run/a@b", "postgresql://judge@db.example:5432/vmjudge?host=/run/a@b"),
    ("postgresql:///vmjudge?user=judge&mypassword=x", "postgresql:///vmjudge?user=judge&mypassword=x"),
])
def test_a_urls_password_is_never_shown(url, shown):
    assert redacted(url) == shown


def test_an_unreachable_postgresqls_sentence_hides_its_passwords(tmp_path):
    with pytest.raises(VmjudgeError) as raised:
        Queue(f"postgresql://judge:first-secret@/vmjudge?host={tmp_path}&password=second-secret")
    said = str(raised.value)
    assert "judge:***@" in said and "password=***" in said
    assert "first-secret" not in said and "second-secret" not in said


def test_both_backends_share_the_same_state_machine(queue_location, tmp_path):
    """A sanity check of the dialects: the same calls give the same rows on both."""
    (a,) = hosts(queue_location, tmp_path, "a")
    eid = add(a, tmp_path)
    run = a.start_stage(a.claim_next().id, "prep", 0)
    a.finish_stage(run, "passed", "ok", {"k": [1, 2]}, next_stage="quiz")
    assert a.stage_runs(eid)[0].manifest == {"k": [1, 2]}
    used = a.owner_usage("c", "alice", False)
    assert (used.scored, used.pending) == (0, 1) and used.vm_seconds >= 0
    assert Path(a.challenge_dir("c")) == tmp_path
