"""Fair share between owners, on the real queue (SQLite, and PostgreSQL), by property tests:
random owners submit at random moments while one slot takes stage after stage, each running
a random time. At every claim the test checks the order against its own bookkeeping, and once
the last entry is in, that every ready stage is claimed within a bound it computes."""

from __future__ import annotations

import hashlib
import tempfile
import time
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vmjudge.pipeline import FIRST, PIPELINE, next_stage
from vmjudge.queue import db as db_module
from vmjudge.queue.db import Queue

VM = {s.name for s in PIPELINE if s.in_vm}
DMIN, DMAX = 1, 20  # seconds a VM stage runs in the simulation

# A schedule: ("submit", owner) or ("run", seconds the next stage takes)
actions = st.lists(st.one_of(st.tuples(st.just("submit"), st.sampled_from("abcd")),
                             st.tuples(st.just("run"), st.integers(DMIN, DMAX))), min_size=1, max_size=40)


class Model:
    """What the test knows without asking the queue how it decides."""

    def __init__(self, queue: Queue, archive: Path):
        self.queue, self.archive = queue, archive
        self.used: dict[str, float] = {}  # owner -> charged VM seconds
        self.owner: dict[int, str] = {}
        self.stage: dict[int, str | None] = {}  # entry -> stage queued (None: done)
        self.ready_since: dict[int, int] = {}  # entry -> claims made when its current stage became ready
        self.claims = 0
        self.bound: dict[int, int] = {}  # entry -> the most claims its ready stage may wait (after the last submit)

    def submit(self, owner: str) -> None:
        sha = hashlib.sha256(b"PK").hexdigest()
        eid = self.queue.add_entry("c", owner, False, sha, f"{owner}-entry.zip", self.archive)
        self.owner[eid], self.stage[eid], self.ready_since[eid] = owner, FIRST, self.claims

    def ahead(self, eid: int) -> tuple:
        """The fair order's key, from the test's own bookkeeping."""
        return (self.used.get(self.owner[eid], 0.0), self.stage[eid] == FIRST, eid)

    def run(self, clock: list[float], seconds: int) -> None:
        ready = [e for e, s in self.stage.items() if s is not None]
        entry = self.queue.claim_next()
        if not ready:
            assert entry is None
            return
        assert entry is not None and entry.id in ready
        best = min(ready, key=self.ahead)
        assert self.ahead(entry.id) == self.ahead(best), (entry.id, best, self.used)  # fair order
        waited = self.claims - self.ready_since[entry.id]
        if entry.id in self.bound:
            assert waited <= self.bound[entry.id], (entry.id, waited, self.bound[entry.id])
        self.claims += 1
        run = self.queue.start_stage(entry.id, entry.stage, 0)
        stage = entry.stage
        if stage in VM:
            clock[0] += seconds
            self.used[self.owner[entry.id]] = self.used.get(self.owner[entry.id], 0.0) + seconds
        following = next_stage(stage)
        if following is None:
            self.queue.finish_stage(run, "scored", "ok", {}, outcome="scored", scores={"score": 1.0})
        else:
            self.queue.finish_stage(run, "passed", "ok", {}, next_stage=following)
        self.stage[entry.id] = following
        self.ready_since[entry.id] = self.claims
        self.bound.pop(entry.id, None)

    def set_bounds(self) -> None:
        """Once nothing more arrives: a ready stage of owner O waits at most for O's own stages
        ahead of it (each of those entries has at most 4 stages left) and, for each other owner
        P, for P's VM stages while P has used no more than O will have (each adds at least DMIN)
        and P's scorings (one per entry of P)."""
        remaining = {e: len(PIPELINE) - [s.name for s in PIPELINE].index(s) for e, s in self.stage.items()
                     if s is not None}
        for eid in remaining:
            o = self.owner[eid]
            mine = [e for e in remaining if self.owner[e] == o and e != eid and self.ahead(e) < self.ahead(eid)]
            own = sum(remaining[e] for e in mine)
            top = self.used.get(o, 0.0) + own * DMAX
            others = 0
            for p in {self.owner[e] for e in remaining} - {o}:
                entries = [e for e in remaining if self.owner[e] == p]
                vm_claims = int(max(0.0, top - self.used.get(p, 0.0)) // DMIN) + 1
                others += min(vm_claims + len(entries), sum(remaining[e] for e in entries))
            self.bound[eid] = (self.claims - self.ready_since[eid]) + own + others


def simulate(queue: Queue, archive: Path, schedule) -> Model:
    clock = [float(int(time.time()))]  # whole seconds: the queue's sums and the test's are exact
    model = Model(queue, archive)
    with mock.patch.object(db_module.time, "time", lambda: clock[0]):
        queue.add_challenge("c", archive.parent, "key")
        last_submit = max((i for i, (kind, _) in enumerate(schedule) if kind == "submit"), default=-1)
        for i, (kind, value) in enumerate(schedule):
            if kind == "submit":
                model.submit(value)
            else:
                model.run(clock, value)
            if i == last_submit:
                model.set_bounds()
        if last_submit == -1:
            model.set_bounds()
        while any(s is not None for s in model.stage.values()):  # the slot empties the queue
            model.run(clock, DMAX)
    return model


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schedule=actions)
def test_fair_share_on_sqlite(schedule):
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / "x.zip"
        archive.write_bytes(b"PK")
        model = simulate(Queue(Path(tmp) / "queue.db"), archive, schedule)
    assert all(s is None for s in model.stage.values())  # nothing starved: every entry finished


@pytest.fixture(scope="module")
def shared_url(postgres):
    from .pg_server import fresh_database
    return fresh_database(postgres, "fair_share")


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(schedule=actions)
def test_fair_share_on_postgresql(shared_url, schedule):
    queue = Queue(shared_url)
    with queue.database.transaction() as db:
        db.execute("TRUNCATE entries, stage_runs, events, challenges, blobs, blob_parts, owner_usage RESTART IDENTITY "
                   "CASCADE")
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / "x.zip"
        archive.write_bytes(b"PK")
        model = simulate(queue, archive, schedule)
    assert all(s is None for s in model.stage.values())


class OneQueue:
    """A SQLite queue with challenge "c", an archive, and a clock the queue reads (moved by hand)."""

    def __init__(self, tmp_path: Path):
        self.archive = tmp_path / "x.zip"
        self.archive.write_bytes(b"PK")
        self.clock = [time.time()]
        self.patch = mock.patch.object(db_module.time, "time", lambda: self.clock[0])
        self.patch.start()
        self.queue = Queue(tmp_path / "queue.db")
        self.queue.add_challenge("c", tmp_path, "key")

    def add(self, owner: str) -> int:
        return self.queue.add_entry("c", owner, False, hashlib.sha256(b"PK").hexdigest(), f"{owner}-entry.zip",
                                    self.archive)


@pytest.fixture
def one(tmp_path):
    made = OneQueue(tmp_path)
    yield made
    made.patch.stop()


def test_twenty_entries_of_one_owner_do_not_hold_back_anothers_first(one):
    """The issue's example: A submits 20 entries, then B one: B's is the next stage claimed
    once A has used some VM time, not the twenty-first."""
    queue, clock = one.queue, one.clock
    a = [one.add("alice") for _ in range(20)]
    first = queue.claim_next()
    run = queue.start_stage(first.id, "prep", 0)
    clock[0] += 30
    b = one.add("bob")
    assert queue.claim_next().id == b  # alice has a stage running 30 s; bob has used nothing
    queue.finish_stage(run, "passed", "ok", {}, next_stage="quiz")
    assert queue.claim_next().id == first.id  # alice's begun entry before her new ones
    assert queue.entry(a[1]).state == "queued"


def test_the_organisers_batch_waits_for_every_participants_stage(one):
    queue = one.queue
    old = one.add("carol")
    queue.finish_stage(queue.start_stage(queue.claim_next().id, "prep", 0), "failed", "x", {},
                       reason="setup-error", outcome="failed")
    queue.rerun(old)  # rescore --rerun-stages: organiser's batch work
    new = one.add("dave")
    assert queue.claim_next().id == new
    assert queue.claim_next().id == old  # only once no participant's stage is ready


def test_infrastructure_failures_are_never_charged(one):
    queue, clock = one.queue, one.clock
    eid = one.add("erin")
    run = queue.start_stage(queue.claim_next().id, "prep", 0)
    clock[0] += 100
    queue.infra_failure(run, "vm-start", "x", {})
    clock[0] += 10
    run = queue.start_stage(queue.claim_next().id, "prep", 0)
    clock[0] += 42
    queue.finish_stage(run, "passed", "ok", {}, next_stage="quiz")
    assert [r.vm_seconds for r in queue.stage_runs(eid)] == [None, pytest.approx(42)]
