"""`vmjudge gc` and site.toml's [retention], on a real queue (no VMs).

Entries are submitted with the real admission code and taken to their states with the
queue's own API; their results directories hold what the stages leave there, made by the
stages' own writers (prep's unpacking and install tree, qemu-img's home disk and overlay,
the stage logs, the report). Ages are set by moving the entries' event times back in the
database, as a fixture."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from vmjudge.config import load_challenge, load_site
from vmjudge.queue import retry
from vmjudge.queue.admit import admit
from vmjudge.queue.db import Queue
from vmjudge.queue.results import encode, put
from vmjudge.queue.retry import MAX_INFRA_ATTEMPTS
from vmjudge.queue.rows import stamp
from vmjudge.reports import report
from vmjudge.stages.context import StageContext
from vmjudge.stages.prep import stage as prep
from vmjudge.supervisor.evaluate import run_stage
from vmjudge.supervisor.slots import Slot
from vmjudge.vm.channel import CommandResult
from vmjudge.vm.runner import make_blank_disk, make_overlay

from .cli import run_cli
from .test_spool import make_tar

REPO = Path(__file__).resolve().parent.parent
AF2017 = REPO / "examples" / "af2017"
RECORDS = tuple((AF2017 / "test" / "RECORDS").read_text().split())
DAY = 86400
LOGS = {"prep.log", "quiz.log", "exam.log", "report.html"}  # always kept
TREE = {"entry", "install"}
DISKS = {"home.qcow2", "quiz-overlay.qcow2"}
CONSOLES = {"console-prep-1.log", "console-quiz-1.log", "console-quiz-1.log.0"}  # .0: rotated by virtlogd
ISOS = {"prep-1.iso"}
EVERYTHING = LOGS | TREE | DISKS | CONSOLES | ISOS


class Home:
    def __init__(self, root: Path):
        self.root = root
        self.site = load_site(root / "home")
        self.site.layout.ensure()
        self.queue = Queue(self.site.layout.queue_db)
        self.queue.add_challenge("af2017", AF2017, "key")
        self.challenge = load_challenge(AF2017)
        self.made = 0

    def retention(self, **days: int) -> None:
        (self.site.home / "site.toml").write_text("[retention]\n" + "".join(f"{k} = {v}\n" for k, v in days.items()))
        self.site = load_site(self.site.home)

    def vmjudge(self, *args: str) -> subprocess.CompletedProcess:
        return run_cli(*args, home=self.site.home)

    def submit(self) -> int:
        self.made += 1
        archive = make_tar(self.root / f"e{self.made}-entry.tar.gz", {
            "setup.sh": b"true\n", "next.sh": f"echo {self.made}\n".encode(), "answers.txt": b"A00001,N\n",
            "AUTHORS.txt": b"me\n", "LICENSE.txt": b"mine\n"})
        return admit(self.site, self.queue, "af2017", self.challenge, archive, f"owner{self.made}", False).entry_id

    def context(self, entry_id: int) -> StageContext:
        return StageContext(site=self.site, challenge=self.challenge, image=None,
                            entry=self.queue.entry(entry_id), attempt=1)

    def lay_out(self, entry_id: int) -> None:
        """What an evaluation leaves in results/ID (an overlay too, as a crash would)."""
        ctx = self.context(entry_id)
        prep.unpack_entry(ctx)
        prep.set_aside_submitted_answers(ctx)
        make_blank_disk(ctx.home_disk, 16)
        make_overlay(ctx.results_dir / "quiz-overlay.qcow2", ctx.home_disk)
        for stage in ("prep", "quiz", "exam"):
            with ctx.stage_log(stage) as log:
                log.output(CommandResult(index=0, name="next.sh t1"), f"{stage} output\n".encode())
        for name in CONSOLES:
            (ctx.results_dir / name).write_text("[    0.000000] Linux version\n" * 100)
        (ctx.results_dir / "prep-1.iso").write_bytes(b"\0" * 65536)

    def stage(self, entry_id: int, stage: str, status: str, **kw) -> None:
        self.queue.claim_next(only=entry_id)
        run = self.queue.start_stage(entry_id, stage, 0)
        self.queue.finish_stage(run, status, f"{stage} {status}", {"stage": stage}, **kw)

    def scored(self) -> int:
        entry_id = self.submit()
        self.lay_out(entry_id)
        self.stage(entry_id, "prep", "passed", next_stage="quiz")
        self.stage(entry_id, "quiz", "passed", next_stage="exam")
        answers = dict.fromkeys(RECORDS, "N")
        digest = put(self.site.home, encode(RECORDS, dict.fromkeys(RECORDS, "ok"), "answer-lines", answers=answers))
        self.stage(entry_id, "exam", "passed", next_stage="score", results_sha256=digest)
        run_stage(self.queue, self.site, self.queue.claim_next(only=entry_id), Slot(0))  # the real stage 4
        assert self.queue.entry(entry_id).outcome == "scored"
        return entry_id

    def failed(self) -> int:
        entry_id = self.submit()
        self.lay_out(entry_id)
        self.stage(entry_id, "prep", "failed", reason="setup-error", outcome="failed")
        report.write_html(self.queue, self.site, entry_id)
        return entry_id

    def parked(self) -> int:
        entry_id = self.submit()
        self.lay_out(entry_id)
        for _ in range(MAX_INFRA_ATTEMPTS):
            self.queue.claim_next(only=entry_id)
            run = self.queue.start_stage(entry_id, "prep", 0)
            self.queue.infra_failure(run, "vm-start", "the VM would not start", {})
        assert self.queue.entry(entry_id).state == "parked"
        report.write_html(self.queue, self.site, entry_id)
        return entry_id

    def waiting(self, running: bool) -> int:
        entry_id = self.submit()
        self.lay_out(entry_id)
        report.write_html(self.queue, self.site, entry_id)
        if running:
            self.queue.claim_next(only=entry_id)
        return entry_id

    def age(self, entry_id: int, days: float) -> None:
        with sqlite3.connect(self.queue.database.path) as db:
            db.execute("UPDATE events SET at = ? WHERE entry_id = ?", (stamp(time.time() - days * DAY), entry_id))

    def names(self, entry_id: int) -> set[str]:
        return {p.name for p in (self.site.home / "results" / str(entry_id)).iterdir()}

    def du(self, entry_id: int, names: set[str]) -> int:
        """Disk use as du(1) counts it, to check the bytes gc reports."""
        paths = [str(self.site.home / "results" / str(entry_id) / n) for n in sorted(names)]
        out = subprocess.run(["du", "-s", "-B1", *paths], capture_output=True, text=True, check=True,
                             timeout=300).stdout
        return sum(int(line.split()[0]) for line in out.splitlines())


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setattr(retry, "RETRY_DELAYS", (0.0, 0.0))  # park without waiting out retry delays
    return Home(tmp_path)


def test_gc_removes_exactly_what_each_finished_entrys_age_allows(home):
    home.retention(entry_tree_days=7, home_disk_days=30, console_log_days=30, media_days=60)
    old_scored, old_parked, recent_failed, fresh = home.scored(), home.parked(), home.failed(), home.failed()
    queued, running = home.waiting(running=False), home.waiting(running=True)
    for entry_id, days in ((old_scored, 40), (old_parked, 40), (recent_failed, 10), (queued, 400), (running, 400)):
        home.age(entry_id, days)
    everyone = (old_scored, old_parked, recent_failed, fresh, queued, running)
    assert all(home.names(e) == EVERYTHING for e in everyone)
    expected = {old_scored: TREE | DISKS | CONSOLES, recent_failed: TREE}  # parked: may yet run again
    freed = sum(home.du(e, names) for e, names in expected.items())

    dry = home.vmjudge("gc", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    planned = json.loads(dry.stdout)
    listed = {(r["entry_id"], r["name"]) for r in planned["removed"]}
    assert listed == {(entry_id, name) for entry_id, names in expected.items() for name in names}
    assert planned["dry_run"] is True and planned["bytes"] == freed
    assert all(home.names(e) == EVERYTHING for e in everyone)  # --dry-run removed nothing

    done = home.vmjudge("gc")
    assert done.returncode == 0, done.stderr
    assert f"entry {old_scored}: removed home.qcow2 (" in done.stdout and "home_disk_days = 30)" in done.stdout
    assert done.stdout.splitlines()[-1] == f"removed 9 items of 2 entries, {freed / 1e6:.1f} MB freed"
    for entry_id in everyone:
        assert home.names(entry_id) == EVERYTHING - expected.get(entry_id, set()), entry_id
    assert home.queue.entry(queued).state == "queued" and home.queue.entry(running).state == "running"


def test_the_removals_are_in_the_event_log_and_do_not_reset_the_age(home):
    home.retention(home_disk_days=30)
    entry_id = home.scored()
    home.age(entry_id, 40)
    assert home.vmjudge("gc").returncode == 0
    assert home.names(entry_id) == EVERYTHING - DISKS
    organiser = json.loads(home.vmjudge("show", str(entry_id), "--organiser", "--json").stdout)["organiser"]
    collected = [e["detail"] for e in organiser["events"] if e["kind"] == "collected"]
    assert len(collected) == 2 and collected[0].startswith("removed home.qcow2 (")
    assert collected[0].endswith("): [retention] home_disk_days = 30")
    again = home.vmjudge("gc")
    assert again.stdout == "removed 0 items of 0 entries, 0.0 MB freed\n"
    # The entry's last event is still 40 days old, not the minute gc recorded its removals.
    home.retention(home_disk_days=30, console_log_days=30)
    assert home.vmjudge("gc").returncode == 0
    assert home.names(entry_id) == EVERYTHING - DISKS - CONSOLES


def test_after_gc_the_entry_can_still_be_rescored_and_run_again(home):
    home.retention(entry_tree_days=0, home_disk_days=0, console_log_days=0, media_days=0)
    entry_id = home.scored()
    home.age(entry_id, 1)
    assert home.vmjudge("gc").returncode == 0
    assert home.names(entry_id) == LOGS
    before = home.queue.entry(entry_id).scores
    proc = home.vmjudge("rescore", "af2017", "--entries", str(entry_id), "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["entries"][0]["new"] == before
    proc = home.vmjudge("rescore", "af2017", "--entries", str(entry_id), "--rerun-stages")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert home.queue.entry(entry_id).state == "queued"
    home.age(entry_id, 1)
    assert home.vmjudge("gc", "--json").returncode == 0 and home.names(entry_id) == LOGS  # queued: untouched
    prep.unpack_entry(home.context(entry_id))  # what stage 1 does first: the tree again, from the spool
    assert (home.site.home / "results" / str(entry_id) / "entry" / "next.sh").read_text() == "echo 1\n"


def test_an_entry_queued_again_meanwhile_is_left_alone(home):
    home.retention(home_disk_days=0)
    entry_id = home.failed()
    home.age(entry_id, 1)
    last = home.queue.finished_entries()[entry_id]
    home.queue.rerun(entry_id)  # between gc's listing and its removal
    called = []
    assert home.queue.collect(entry_id, last, lambda: called.append(1) or []) is None
    assert called == [] and "home.qcow2" in home.names(entry_id)


def test_without_retention_nothing_is_ever_removed(home):
    entry_id = home.failed()
    home.age(entry_id, 10000)
    proc = home.vmjudge("gc")
    assert (proc.returncode, proc.stdout) == (0, "site.toml has no [retention] days: nothing is removed, ever.\n")
    assert home.names(entry_id) == EVERYTHING
