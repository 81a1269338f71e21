"""`vmjudge gc` and container entries' roots (images/root_store.py), on a real queue with real
roots (no VM): entries submitted with the real admission code, their stage 1 run by the real
stage (the container prep runs on the host: skopeo, umoci, mksquashfs), then taken to their
states with the queue's own API. A root that no entry still to be judged names, unused for
[retention] entry_root_days, goes; one an entry queued, running or parked names, one a stage 1
holds the lock of, and one used after gc listed the entries stay."""

from __future__ import annotations

import json
import os
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from vmjudge.archive.container_image import check_image
from vmjudge.config import ImageRecipe, load_challenge, load_site
from vmjudge.config.layout import Layout
from vmjudge.images import root_store
from vmjudge.images.build import build_image
from vmjudge.images.entry_root import RULES, entry_root, lock_path, root_lock
from vmjudge.images.image import GuestImage
from vmjudge.pipeline import by_name
from vmjudge.queue import publish, retry
from vmjudge.queue.admit import admit
from vmjudge.queue.db import Queue
from vmjudge.queue.retry import MAX_INFRA_ATTEMPTS
from vmjudge.stages.context import StageContext
from vmjudge.stages.prep import container as prep_container
from vmjudge.supervisor.attempts import record_outcome
from vmjudge.vm.runner import make_blank_disk

from . import oci_images as oci
from .cli import run_cli
from .conftest import the_test_site
from .needs import root_making_tools
from .oci_images import Image, Layer, file
from .waiting import wait_for

DAY = 86400
GIB = 1 << 30
CHALLENGE = oci.container_challenge("roots")


@pytest.fixture(autouse=True)
def tools():
    root_making_tools()


class Home:
    def __init__(self, root: Path, image: GuestImage):
        self.root, self.guest = root, image
        challenge = root / "challenge"
        (challenge / "training").mkdir(parents=True)
        (challenge / "test").mkdir()
        (challenge / "challenge.toml").write_text(CHALLENGE)
        for subset, record in (("training", "r1"), ("test", "t1")):
            (challenge / subset / "RECORDS").write_text(f"{record}\n")
            (challenge / subset / f"{record}.txt").write_text("x\n")
        self.challenge = load_challenge(challenge)
        self.site = load_site(root / "home")
        self.site.layout.ensure()
        self.queue = Queue(self.site.layout.queue_db)
        self.queue.add_challenge("roots", challenge, "key")
        self.made = 0

    def retention(self, days: int) -> None:
        (self.site.home / "site.toml").write_text(f"[retention]\nentry_root_days = {days}\n")
        self.site = load_site(self.site.home)

    def image(self, layer: bytes, cmd: str = "run") -> Path:
        self.made += 1
        archive = self.root / f"e{self.made}-image.tar"
        return oci.docker_save(archive, Image([Layer.of([file("data", layer)], None)], cmd=[f"/{cmd}"]))

    def prepped(self, layer: bytes, cmd: str = "run") -> int:
        """An entry whose stage 1 (the real one) made or found its root: queued for its quiz."""
        archive = self.image(layer, cmd)
        entry_id = admit(self.site, self.queue, "roots", self.challenge, archive, f"o{self.made}", False).entry_id
        self.stage_1(entry_id)
        return entry_id

    def stage_1(self, entry_id: int) -> None:
        """Stage 1 as the daemon runs it for a container entry, which needs no VM (nor image): the
        stage's own function, its outcome recorded by the supervisor's own code."""
        entry = self.queue.claim_next(only=entry_id)
        run = self.queue.start_stage(entry_id, "prep", 0)
        ctx = StageContext(site=self.site, challenge=self.challenge, image=self.guest, entry=entry, attempt=run.attempt,
                           runner=HostDisks())
        record_outcome(self.queue, run, by_name("prep").load()(ctx))
        assert self.queue.entry(entry_id).stage == "quiz", self.queue.stage_runs(entry_id)[-1].message

    def done(self, layer: bytes, cmd: str = "run") -> int:
        entry_id = self.prepped(layer, cmd)
        self.queue.claim_next(only=entry_id)
        run = self.queue.start_stage(entry_id, "quiz", 0)
        self.queue.finish_stage(run, "failed", "quiz failed", {}, reason="quiz-error", outcome="failed")
        assert self.queue.entry(entry_id).state == "done"
        return entry_id

    def parked(self, layer: bytes) -> int:
        entry_id = self.prepped(layer)
        for _ in range(MAX_INFRA_ATTEMPTS):
            self.queue.claim_next(only=entry_id)
            run = self.queue.start_stage(entry_id, "quiz", 0)
            self.queue.infra_failure(run, "vm-start", "the VM would not start", {})
        assert self.queue.entry(entry_id).state == "parked"
        return entry_id

    def root_of(self, entry_id: int) -> Path:
        return Path(json.loads(self.site.layout.results_of(entry_id).entry_root.read_text())["squashfs"])

    def store(self) -> set[str]:
        return {p.name for p in (self.site.layout.entry_roots / RULES).iterdir()}

    def age(self, squashfs: Path, days: float) -> None:
        when = time.time() - days * DAY
        os.utime(squashfs.with_suffix(".json"), (when, when))

    def gc(self, *args: str) -> dict:
        proc = run_cli("gc", "--json", *args, home=self.site.home)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)["entry_roots"]


class HostDisks:
    """The one thing a container entry's stage 1 asks of its job runner: the blank home disk the
    quiz will run on (the judge's own qemu-img call; no VM)."""

    def new_home(self, path: Path, size_mib: int) -> None:
        make_blank_disk(path, size_mib)


def files_of(squashfs: Path) -> set[str]:
    return {squashfs.name, squashfs.with_suffix(".json").name, lock_path(squashfs).name}


@pytest.fixture(scope="module")
def guest_image():
    """The tests' base image (built once for the session, and only read here): stage 1's manifest
    names the image the later stages will run in."""
    return build_image(the_test_site(), ImageRecipe(), progress=lambda m: print(m))


@pytest.fixture
def home(tmp_path, monkeypatch, guest_image):
    monkeypatch.setattr(retry, "RETRY_DELAYS", (0.0, 0.0))  # park without waiting out retry delays
    monkeypatch.setattr(publish, "PREP_STEP", 0.0)  # a made root's quiz claimed at once (issue 54: publish.py)
    return Home(tmp_path, guest_image)


def test_gc_removes_the_roots_no_entry_still_to_be_judged_uses(home):
    home.retention(0)
    waiting, finished, parked = home.prepped(b"a"), home.done(b"b"), home.parked(b"c")
    shared = home.done(b"d", cmd="one")  # done, but the same layers as an entry still waiting
    sharer = home.prepped(b"d", cmd="other")
    roots = {e: home.root_of(e) for e in (waiting, finished, parked, shared, sharer)}
    assert roots[shared] == roots[sharer] and len(set(roots.values())) == 4
    everything = set().union(*(files_of(r) for r in roots.values()))
    assert home.store() == everything
    for root in roots.values():
        home.age(root, 1)  # a root used in the last seconds is kept: a use gc's listing might have missed

    dry = home.gc("--dry-run")
    assert [r["name"] for r in dry["removed"]] == [f"{RULES}/{roots[finished].name}"]
    assert dry["bytes"] == roots[finished].stat().st_blocks * 512 + \
        roots[finished].with_suffix(".json").stat().st_blocks * 512
    assert home.store() == everything  # --dry-run removed nothing

    done = home.gc()
    assert [r["name"] for r in done["removed"]] == [f"{RULES}/{roots[finished].name}"]
    assert (done["in_use"], done["busy"], done["problems"]) == (3, 0, [])
    assert home.store() == everything - files_of(roots[finished])
    text = run_cli("gc", home=home.site.home).stdout
    assert text.splitlines()[-1] == "entry roots: removed 0, 0.0 MB; kept 3 that entries not yet done use and 0 " \
                                    "in use by a stage 1 now"

    # The entry run again from stage 1 makes its root again, and finds it afterwards.
    home.queue.rerun(finished)
    home.stage_1(finished)
    manifest = home.queue.stage_runs(finished)[-1].manifest
    assert manifest["entry_root"]["reused"] is False and home.root_of(finished) == roots[finished]
    assert home.store() == everything


def test_only_roots_unused_for_the_policys_days_go(home):
    home.retention(7)
    recent, old = home.root_of(home.done(b"recent")), home.root_of(home.done(b"old"))
    home.age(recent, 3)
    home.age(old, 10)
    removed = home.gc()["removed"]
    assert [(r["name"], r["unused_days"]) for r in removed] == [(f"{RULES}/{old.name}", 10.0)]
    assert recent.exists() and not old.exists()
    # Each use dates the root anew: a root found by a later entry is as young as that entry.
    home.age(recent, 10)
    home.prepped(b"recent", cmd="again")
    assert home.gc()["removed"] == [] and recent.exists()


def test_without_the_days_no_root_is_removed(home):
    root = home.root_of(home.done(b"kept"))
    home.age(root, 10000)
    assert home.gc() == {"dry_run": False, "entry_root_days": None, "bytes": 0, "in_use": 0, "busy": 0,
                         "removed": [], "problems": []}
    assert root.exists()


def test_a_root_a_stage_1_holds_is_kept(home):
    home.retention(0)
    root = home.root_of(home.done(b"held"))
    home.age(root, 1)
    with root_lock(lock_path(root)) as held:
        assert held
        report = home.gc()
    assert (report["removed"], report["busy"]) == ([], 1) and root.exists()


def test_a_root_used_after_gc_listed_the_entries_is_kept(home, monkeypatch):
    """A stage 1 that finds the root after gc listed the entries' records and found the root old,
    just before gc takes its lock: its entry's record is not in the listing, but the root's record
    says it was used."""
    home.retention(0)
    root = home.root_of(home.done(b"late"))
    home.age(root, 1)
    archive = home.root / "e1-image.tar"
    taking = root_store.root_lock

    def a_use_then_the_lock(path: Path, wait: bool = True):
        entry_root(home.site.layout, archive, check_image(archive), GIB)  # another entry's stage 1, now
        return taking(path, wait)
    monkeypatch.setattr(root_store, "root_lock", a_use_then_the_lock)
    report = root_store.collect_roots(home.site, home.queue)
    assert (report.removals, report.in_use) == ([], 1) and root.exists()


def test_gc_during_a_stage_1_keeps_the_root_it_found(home, monkeypatch):
    """gc running while a stage 1 has found a root (one made long ago for another entry, now done)
    and is reading the image's submitted results, before it records its entry's use: the root's
    lock is still held, so gc keeps it, and the entry's quiz finds it."""
    home.retention(0)
    root = home.root_of(home.done(b"found"))
    home.age(root, 1)
    reports = []
    reading = prep_container.read_submitted

    def gc_meanwhile(*args, **kw):
        reports.append(root_store.collect_roots(home.site, home.queue))
        return reading(*args, **kw)
    monkeypatch.setattr(prep_container, "read_submitted", gc_meanwhile)
    entry_id = home.prepped(b"found", cmd="second")
    assert [(r.removals, r.busy) for r in reports] == [([], 1)]
    assert home.root_of(entry_id) == root and root.exists()


def test_a_crashs_work_directory_goes_with_its_root_when_no_one_holds_it(home):
    home.retention(0)
    root = home.root_of(home.done(b"crashed"))
    home.age(root, 1)
    work = root.parent / f".work-{root.stem}-x1y2"
    (work / "rootfs" / "deep").mkdir(parents=True)
    (work / "rootfs" / "deep" / "file").write_bytes(b"z" * 10000)
    report = home.gc()
    assert [r["name"] for r in report["removed"]] == [f"{RULES}/{root.name}"]
    assert home.store() == set()


def test_a_stage_1_waiting_for_the_lock_gc_removes_makes_the_root_anew(tmp_path):
    """gc removes the lock file it holds; a stage 1 that waited on that file gets a lock no one
    else can see, notices, and locks the file at the path instead: it never holds "the" lock at
    the same time as a later caller."""
    archive = oci.docker_save(tmp_path / "w-image.tar", Image([Layer.of([file("w", b"w")], None)]))
    image = check_image(archive)
    layout = Layout(tmp_path / "home")
    first = entry_root(layout, archive, image, GIB)
    results: list = []
    with root_lock(lock_path(first.path)):
        waiter = threading.Thread(target=lambda: results.append(entry_root(layout, archive, image, GIB)))
        waiter.start()
        wait_for(lambda: blocked_on(lock_path(first.path)), 60, "the stage 1 waiting for the root's lock")
        root_store._remove(first.path)  # what gc does under the lock
    waiter.join(timeout=300)
    assert len(results) == 1 and results[0].reused is False and results[0].path.exists()
    assert lock_path(first.path).exists()


def test_a_waiter_on_a_removed_lock_file_takes_the_new_one(tmp_path):
    """The holder of the first file removes it and locks a new file at the path before it lets the
    first go: the woken waiter must then wait for the new one's holder, not run beside it."""
    path = tmp_path / ".x.lock"
    order: list[str] = []
    with ExitStack() as first:
        assert first.enter_context(root_lock(path))
        old = path.stat().st_ino

        def waiter() -> None:
            with root_lock(path):
                order.append("waiter")
        t = threading.Thread(target=waiter)
        t.start()
        wait_for(lambda: blocked_on(path, old), 60, "the waiter blocking on the first lock file")
        path.unlink()
        with root_lock(path, wait=False) as got:
            assert got
            new = path.stat().st_ino
            first.close()  # the waiter wakes on the removed file, and must move to the new one
            wait_for(lambda: blocked_on(path, new), 60, "the waiter moving to the new lock file")
            order.append("new holder")
    t.join(timeout=60)
    assert order == ["new holder", "waiter"]


def blocked_on(path: Path, inode: int | None = None) -> bool:
    """Whether some process waits for a flock on the file at `path` (or on inode `inode` of its
    file system): /proc/locks lists a waiter as a line with "->"."""
    st = path.stat() if inode is None else None
    ino = inode if inode is not None else st.st_ino  # type: ignore[union-attr]
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if "->" in fields and fields[fields.index("->") + 1] == "FLOCK" and \
                int(fields[-3].rsplit(":", 1)[-1]) == ino:
            return True
    return False
