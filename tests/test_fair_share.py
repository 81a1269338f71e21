"""Fair share between owners, on the real queue (SQLite, and PostgreSQL), by property tests:
random owners submit at random moments and the organiser queues done entries again (batch
work) while one slot takes stage after stage, each running a random time, and up to two more
slots hold stages running meanwhile, so claims are made while other stages run. At every claim
the test checks the order against its own bookkeeping, and once nothing more arrives, that
every ready stage is claimed within a bound it computes; at the end, that the queue finished
every entry and charged each owner what the test counted (never the organiser's re-runs)."""

from __future__ import annotations

import hashlib
import tempfile
import time
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from vmjudge.cli.home import queue_of
from vmjudge.config import load_site
from vmjudge.pipeline import FIRST, PIPELINE, STAGE_NAMES, next_stage
from vmjudge.queue import db as db_module
from vmjudge.queue.db import Queue
from vmjudge.queue.fair_share import USAGE_BY_OWNER, usage_args
from vmjudge.queue.listing import usage_by_owner
from vmjudge.queue.rows import StageRun

from .test_organiser_reruns import first_claimed

VM = {s.name for s in PIPELINE if s.in_vm}
DMIN, DMAX = 1, 20  # seconds a VM stage of the main slot runs in the simulation
HELD = 2  # slots beside the main one, each holding a stage running until the schedule releases it

# A schedule: ("submit", owner), ("run", seconds the main slot's next stage takes), ("rerun", k):
# the organiser queues the k-th done entry again, ("hold", seconds): another slot takes the next
# stage and keeps it running while the seconds pass, ("release", k): the k-th stage held ends.
actions = st.lists(st.one_of(st.tuples(st.just("submit"), st.sampled_from("abcd")),
                             st.tuples(st.just("run"), st.integers(DMIN, DMAX)),
                             st.tuples(st.just("rerun"), st.integers(0, 99)),
                             st.tuples(st.just("hold"), st.integers(DMIN, DMAX)),
                             st.tuples(st.just("release"), st.integers(0, HELD - 1))), min_size=10, max_size=40)
# Entries judged before the schedule begins (owner, seconds each VM stage took, whether the
# organiser has queued it again as the schedule begins): batch work from the start, and done
# entries for the schedule's own re-runs.
history = st.lists(st.tuples(st.sampled_from("abcd"), st.integers(DMIN, DMAX), st.booleans()), max_size=3)


class Model:
    """What the test knows without asking the queue how it decides."""

    def __init__(self, queue: Queue, archive: Path, clock: list[float]):
        self.queue, self.archive, self.clock = queue, archive, clock
        self.used: dict[str, float] = {}  # owner -> charged VM seconds of ended runs
        self.organiser: dict[str, float] = {}  # owner -> VM seconds of the organiser's re-runs of its entries
        self.owner: dict[int, str] = {}
        self.batch: set[int] = set()  # entries the organiser queued again
        self.stage: dict[int, str | None] = {}  # entry -> stage queued or running (None: done)
        self.held: list[StageRun] = []  # stages running in the other slots
        self.ready_since: dict[int, int] = {}  # entry -> claims made when its current stage became ready
        self.claims = 0
        self.bound: dict[int, int] = {}  # entry -> the most claims its ready stage may wait (once nothing arrives)

    def submit(self, owner: str) -> None:
        sha = hashlib.sha256(b"PK").hexdigest()
        eid = self.queue.add_entry("c", owner, False, sha, f"{owner}-entry.zip", self.archive)
        self.owner[eid], self.stage[eid], self.ready_since[eid] = owner, FIRST, self.claims

    def rerun(self, k: int) -> None:
        """The organiser queues the k-th entry done again (`rescore --rerun-stages`), if any is done."""
        done = sorted(e for e, s in self.stage.items() if s is None)
        if done:
            self.again(done[k % len(done)])

    def again(self, eid: int) -> None:
        self.queue.rerun(eid)
        self.batch.add(eid)
        self.stage[eid], self.ready_since[eid] = FIRST, self.claims

    def use(self, owner: str) -> float:
        """The owner's VM time as fair share weighs it now: ended runs charged, and the owner's
        own stages running in VMs for as long as they have run (the organiser's never)."""
        running = sum(self.clock[0] - run.started for run in self.held
                      if run.stage in VM and run.entry_id not in self.batch and self.owner[run.entry_id] == owner)
        return self.used.get(owner, 0.0) + running

    def ahead(self, eid: int) -> tuple:
        """The fair order's key, from the test's own bookkeeping."""
        return (eid in self.batch, self.use(self.owner[eid]), self.stage[eid] == FIRST, eid)

    def weighed(self) -> dict[str, float]:
        """Each owner's VM time as the queue's claim weighs it (fair_share.USAGE_BY_OWNER), now."""
        with self.queue.database.connect() as db:
            rows = db.execute(USAGE_BY_OWNER, usage_args(self.clock[0], self.queue.fair_window)).fetchall()
        return {r["owner"]: r["used"] for r in rows if r["used"]}

    def ready(self) -> list[int]:
        running = {run.entry_id for run in self.held}
        return [e for e, s in self.stage.items() if s is not None and e not in running]

    def claim(self) -> StageRun | None:
        """The queue's claim, checked: the ready stage first in the fair order, within its bound."""
        ready = self.ready()
        entry = self.queue.claim_next()
        if not ready:
            assert entry is None
            return None
        assert entry is not None and entry.id in ready and entry.stage == self.stage[entry.id]
        best = min(ready, key=self.ahead)
        assert self.ahead(entry.id) == self.ahead(best), (entry.id, best, self.used)  # fair order
        owners = set(self.owner.values())
        assert self.weighed() == {o: self.use(o) for o in owners if self.use(o)}  # what the order weighed
        if any(run.entry_id in self.batch and run.stage in VM and run.started < self.clock[0] for run in self.held):
            event("claimed while batch work had run in a VM for a while")
        waited = self.claims - self.ready_since[entry.id]
        if entry.id in self.bound:
            assert waited <= self.bound[entry.id], (entry.id, waited, self.bound[entry.id])
        self.claims += 1
        return self.queue.start_stage(entry.id, entry.stage, 0)

    def run(self, seconds: int) -> None:
        run = self.claim()
        if run is not None:
            if run.stage in VM:
                self.clock[0] += seconds
            self.finish(run)

    def hold(self, seconds: int) -> None:
        if len(self.held) < HELD and (run := self.claim()) is not None:
            self.held.append(run)
            self.clock[0] += seconds

    def release(self, k: int) -> None:
        if self.held:
            self.finish(self.held.pop(k % len(self.held)))

    def finish(self, run: StageRun) -> None:
        eid, owner = run.entry_id, self.owner[run.entry_id]
        if run.stage in VM:
            if eid in self.batch:
                event("batch work ran in a VM")
            spent = self.organiser if eid in self.batch else self.used
            spent[owner] = spent.get(owner, 0.0) + self.clock[0] - run.started
        following = next_stage(run.stage)
        if following is None:
            self.queue.finish_stage(run, "scored", "ok", {}, outcome="scored", scores={"score": 1.0})
        else:
            self.queue.finish_stage(run, "passed", "ok", {}, next_stage=following)
        self.stage[eid] = following
        self.ready_since[eid] = self.claims
        self.bound.pop(eid, None)

    def stages_left(self) -> dict[int, int]:
        return {e: len(STAGE_NAMES) - STAGE_NAMES.index(s) for e, s in self.stage.items() if s is not None}

    def set_bounds(self) -> None:
        """Once nothing more arrives and nothing is held, the main slot alone runs every stage
        left. A participant's ready stage of owner O waits at most for O's own stages ahead of it
        (each of those entries has at most 4 stages left) and, for each other owner P, for P's
        VM stages while P has used no more than O will have (each adds at least DMIN) and P's
        scorings (one per entry of P); never for batch work, which runs only when no
        participant's stage is ready. A stage of batch work waits at most for every other stage."""
        assert not self.held
        remaining = self.stages_left()
        ours = {e: n for e, n in remaining.items() if e not in self.batch}
        for eid in remaining:
            waited = self.claims - self.ready_since[eid]
            if eid in self.batch:
                self.bound[eid] = waited + sum(remaining.values()) - remaining[eid]
                continue
            o = self.owner[eid]
            mine = [e for e in ours if self.owner[e] == o and e != eid and self.ahead(e) < self.ahead(eid)]
            own = sum(ours[e] for e in mine)
            top = self.used.get(o, 0.0) + own * DMAX
            others = 0
            for p in {self.owner[e] for e in ours} - {o}:
                entries = [e for e in ours if self.owner[e] == p]
                vm_claims = int(max(0.0, top - self.used.get(p, 0.0)) // DMIN) + 1
                others += min(vm_claims + len(entries), sum(ours[e] for e in entries))
            self.bound[eid] = waited + own + others

    def check_end(self) -> None:
        """What the queue says once the main slot has run every stage left: nothing more to
        claim, every entry scored, and each owner charged the VM time of their own runs only,
        in the budget's sum and in fair share's hours, with the organiser's re-runs apart."""
        assert self.queue.claim_next() is None
        assert [(e.id, e.state, e.outcome) for e in self.queue.entries()] == [
            (e, "done", "scored") for e in sorted(self.owner)]
        owners = sorted(set(self.owner.values()))
        # The budget's sum charges an exam from its publish time (queue/publish.py): read it then.
        self.clock[0] = max([self.clock[0], *(e.published or 0.0 for e in self.queue.entries())])
        assert {o: self.queue.owner_usage("c", o, False).vm_seconds for o in owners} == \
            {o: self.used.get(o, 0.0) for o in owners}
        assert {u.owner: (u.vm_seconds, u.organiser_seconds) for u in usage_by_owner(self.queue.database, "c")} == \
            {o: (self.used.get(o, 0.0), self.organiser.get(o, 0.0)) for o in owners}
        with self.queue.database.connect() as db:
            hours = {r["owner"]: r["s"] for r in db.execute(
                "SELECT owner, SUM(seconds) AS s FROM owner_usage GROUP BY owner").fetchall()}
        assert hours == {o: self.used[o] for o in owners if o in self.used}


def simulate(queue: Queue, archive: Path, judged, schedule) -> None:
    clock = [float(int(time.time()))]  # whole seconds: the queue's sums and the test's are exact
    model = Model(queue, archive, clock)
    with mock.patch.object(db_module.time, "time", lambda: clock[0]):
        queue.add_challenge("c", archive.parent, "key")
        for owner, seconds, _ in judged:
            model.submit(owner)
            for _ in STAGE_NAMES:
                model.run(seconds)
        for eid, (_, _, again) in zip(sorted(model.owner), judged, strict=True):
            if again:
                model.again(eid)
        arrivals = max((i for i, (kind, _) in enumerate(schedule) if kind != "run"), default=-1)
        if arrivals == -1:
            model.set_bounds()
        for i, (kind, value) in enumerate(schedule):
            if kind == "submit":
                model.submit(value)
            elif kind == "rerun":
                model.rerun(value)
            elif kind == "hold":
                model.hold(value)
            elif kind == "release":
                model.release(value)
            else:
                model.run(value)
            if i == arrivals:  # from here on only the main slot runs
                while model.held:
                    model.release(0)
                model.set_bounds()
        for _ in range(sum(model.stages_left().values())):  # each claim moves one entry on by a stage
            model.run(DMAX)
        model.check_end()


# About 0.5 s an example on SQLite (a file synced at every commit), 0.3 s on PostgreSQL; about one
# in three claims while batch work has run in a VM for a while (--hypothesis-show-statistics),
# so each backend's examples all but surely try that.
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(judged=history, schedule=actions)
def test_fair_share_on_sqlite(judged, schedule):
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / "x.zip"
        archive.write_bytes(b"PK")
        simulate(Queue(Path(tmp) / "queue.db"), archive, judged, schedule)


@pytest.fixture(scope="module")
def shared_queue(postgres):
    """One queue (one connection) for every example: a failing example's queue stays referenced
    while hypothesis shrinks it, and one connection each would exhaust the server's."""
    from .pg_server import fresh_database
    return Queue(fresh_database(postgres, "fair_share"))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(judged=history, schedule=actions)
def test_fair_share_on_postgresql(shared_queue, judged, schedule):
    queue = shared_queue
    with queue.database.transaction() as db:
        db.execute("TRUNCATE entries, stage_runs, events, challenges, blobs, blob_parts, owner_usage RESTART IDENTITY "
                   "CASCADE")
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / "x.zip"
        archive.write_bytes(b"PK")
        simulate(queue, archive, judged, schedule)


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


def test_the_window_counts_by_the_hour_and_forgets_older_runs(tmp_path, queue_location):
    """site.toml [queue] fair_window_hours = 2: a run counts while the hour it started in is
    within the window, which reaches back to the start of the hour 2 hours ago; older runs no
    longer count."""
    home = tmp_path / "home"
    home.mkdir()
    url = f'url = "{queue_location}"\n' if isinstance(queue_location, str) else ""
    (home / "site.toml").write_text(f"[queue]\nfair_window_hours = 2\n{url}")
    archive = tmp_path / "x.zip"
    archive.write_bytes(b"PK")
    hour = int(time.time()) // 3600 - 10
    clock = [hour * 3600 + 3000.0]  # 50 min into the hour
    with mock.patch.object(db_module.time, "time", lambda: clock[0]):
        queue = queue_of(load_site(home))
        queue.add_challenge("c", tmp_path, "key")

        def add(owner: str) -> int:
            return queue.add_entry("c", owner, False, hashlib.sha256(b"PK").hexdigest(), f"{owner}-entry.zip", archive)

        def spend(owner: str, seconds: int) -> None:
            """An entry of `owner` whose prep runs `seconds` from now and fails."""
            run = queue.start_stage(queue.claim_next(only=add(owner)).id, "prep", 0)
            clock[0] += seconds
            queue.finish_stage(run, "failed", "x", {}, outcome="failed", reason="setup-error")

        spend("alice", 100)  # in `hour`
        clock[0] = (hour + 1) * 3600 + 600
        spend("bob", 50)  # in the hour after
        bob, alice = add("bob"), add("alice")
        clock[0] = (hour + 2) * 3600 + 3500  # alice's run began 2 h 8 min ago, in an hour the window holds
        assert first_claimed(queue) == bob  # alice 100 s, bob 50 s
        clock[0] = (hour + 3) * 3600  # alice's hour has left the window, bob's has not
        assert first_claimed(queue) == alice  # alice 0 s, bob 50 s
        clock[0] = (hour + 4) * 3600  # bob's too: both 0 s, so the older entry
        assert first_claimed(queue) == bob
