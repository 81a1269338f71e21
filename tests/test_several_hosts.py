"""Several hosts on one PostgreSQL queue, for real: two daemons with homes of their own, one
TCG slot each, on one libvirt and one throw-away PostgreSQL server (no network address).

One scenario covers the issue's two acceptance runs, to spend CI's minutes once: eight
entries of mixed outcomes, submitted on both hosts; host A is SIGKILLed in the middle of a
quiz; B takes the stage back when A's lease runs out and, A's home disk being gone past the
grace period, starts that entry (and any other waiting for A's disk) again from stage 1; A,
restarted, records nothing stale. Every entry finishes exactly once, with the verdict and
score a single host gives it (the same entries' verdicts test_daemon.py and test_hostile.py
pin on one host), and both daemons took work.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import libvirt
import pytest

from vmjudge.queue.db import Queue
from vmjudge.vm import domain

from .hostile.cases import tar_of
from .test_daemon import QUICK, QUICK_SCORE, own_domains, wait_until
from .test_pipeline import REPO, vmjudge

LEASE, GRACE = 10, 20  # the shortest lease site.toml allows; a grace of two leases

# (files changed from the good entry, expected (outcome, failed stage, reason, score))
SCORED = ("scored", None, None, QUICK_SCORE)
CASES = [
    ({"notes.txt": b"1"}, SCORED),
    ({"DRYRUN": b""}, ("dry-run", None, None, None)),
    ({"notes.txt": b"2"}, SCORED),
    ({"setup.sh": b"#!/bin/sh\necho broken >&2\nexit 3\n"}, ("failed", "prep", "setup-error", None)),
    ({"notes.txt": b"3"}, SCORED),
    ({"next.sh": b"#!/bin/sh\necho \"$1,9\" >> answers.txt\n"}, ("failed", "quiz", "quiz-mismatch", None)),
]


def make_home(site, url: str, host: str) -> Path:
    home = Path(tempfile.mkdtemp(prefix=f"hosts-{host}-", dir=site.home))
    os.chmod(home, 0o711)
    (home / "images").symlink_to(site.layout.images)  # the same image bits on both, as `image import` gives
    (home / "site.toml").write_text(f'[queue]\nurl = "{url}"\nhost = "{host}"\n'
                                    f"lease_seconds = {LEASE}\ngrace_seconds = {GRACE}\n")
    return home


def start(home: Path) -> subprocess.Popen:
    log = open(home / "daemon.log", "ab")  # noqa: SIM115 - the daemon's own stderr, read when a test fails
    return subprocess.Popen([sys.executable, "-m", "vmjudge.cli", "daemon", "-q"], cwd=REPO,
                            env={**os.environ, "VMJUDGE_HOME": str(home)}, stdout=subprocess.DEVNULL, stderr=log)


def running(*daemons_and_homes):
    """Fail at once, with the daemon's last words, if a daemon that should run has exited."""
    for daemon, home in daemons_and_homes:
        if daemon.poll() is not None:
            raise AssertionError(f"the daemon of {home.name} exited ({daemon.returncode}):\n"
                                 + (home / "daemon.log").read_text(errors="replace")[-3000:])
    return True


def stop(daemon: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    if daemon.poll() is None:
        daemon.send_signal(sig)
        daemon.wait(timeout=120)


def vm_running_for(conn, home: Path) -> bool:
    """A VM of this home's runs (resumed, its restore or start done): the homes share their images
    and so their warm states' domain names, but each run's console log and disks are in its home."""
    for name in domain.leftover_domains(conn):
        with contextlib.suppress(libvirt.libvirtError):
            dom = conn.lookupByName(name)
            if dom.state()[0] == libvirt.VIR_DOMAIN_RUNNING and str(home) in dom.XMLDesc(0):
                return True
    return False


@pytest.fixture
def homes(site, image, conn, pg_url):
    a, b = make_home(site, pg_url, "hostA"), make_home(site, pg_url, "hostB")
    yield a, b
    try:
        for home in (a, b):
            assert own_domains(conn, home) == [], (home / "daemon.log").read_text(errors="replace")[-3000:]
    finally:
        subprocess.run(["rm", "-rf", str(a), str(b)], check=True, timeout=300)


def test_two_hosts_finish_every_entry_once_even_when_one_is_killed_mid_quiz(homes, pg_url, conn):
    a, b = homes
    vmjudge(a, "challenge", "add", str(QUICK))
    said = vmjudge(b, "challenge", "add", str(QUICK)).stdout  # the same directory: the same bits
    assert said.startswith("this host's copy of hostile at ")
    ids = {}
    for i, (files, expected) in enumerate(CASES):
        home = (a, b)[i % 2]  # submitted on both hosts: the archive travels in the database
        archive = tar_of(files, home / f"e{i}-entry.tar.gz")
        ids[int(vmjudge(home, "submit", "hostile", str(archive), "--owner", f"o{i}").stdout)] = expected
    queue = Queue(pg_url, host="observer")
    daemon_a, daemon_b = start(a), start(b)
    try:
        def quiz_on_a():
            """A's quiz, once its VM runs: killed while libvirt still restores it, libvirtd 9.0
            itself can crash (docs/development.md), which is not what this test is about."""
            running((daemon_a, a), (daemon_b, b))
            quiz = next((r for e in ids for r in queue.stage_runs(e)
                         if (r.host, r.stage, r.finished_at) == ("hostA", "quiz", None)), None)
            return quiz if quiz is not None and vm_running_for(conn, a) else None
        killed = wait_until(quiz_on_a, 600, "host A to be running a quiz")
        stop(daemon_a, signal.SIGKILL)
        wait_until(lambda: running((daemon_b, b)) and any(r.reason == "host-lost"
                                                           for r in queue.stage_runs(killed.entry_id)), 120,
                   "host B to take back the quiz whose lease ran out")
        wait_until(lambda: running((daemon_b, b)) and any(ev["kind"] == "home-lost"
                                                           for ev in queue.events(killed.entry_id)), 120,
                   "host B to start the entry again from stage 1, A's home disk gone past the grace")
        daemon_a = start(a)  # A comes back: its old claim is no longer its own
        wait_until(lambda: running((daemon_a, a), (daemon_b, b)) and all(queue.entry(e).state == "done" for e in ids),
                   1200, "every entry to finish")
    finally:
        stop(daemon_a)
        stop(daemon_b)
    assert daemon_b.returncode == 0 and daemon_a.returncode == 0
    for entry_id, (outcome, failed_stage, reason, score) in ids.items():
        entry = queue.entry(entry_id)
        assert (entry.outcome, entry.failed_stage, entry.reason) == (outcome, failed_stage, reason), entry
        scorings = queue.scorings(entry_id)
        assert len(scorings) == (1 if outcome == "scored" else 0), scorings  # scored exactly once
        if score is not None:
            assert entry.scores["score"] == pytest.approx(score)
        assert [ev["kind"] for ev in queue.events(entry_id)].count("done") == 1
    runs = {e: queue.stage_runs(e) for e in ids}
    hosts = {r.host for rs in runs.values() for r in rs}
    assert hosts == {"hostA", "hostB"}, hosts  # both took work
    lost = runs[killed.entry_id]
    assert [(r.stage, r.host, r.status, r.reason) for r in lost if r.stage == "quiz"][0] == \
        ("quiz", "hostA", "infra", "host-lost")
    assert [r.status for r in lost if r.stage == "prep"][-1] == "passed" and \
        [r.attempt for r in lost if r.stage == "prep"] == [1, 2]
    hardware = [r.manifest["hardware"] for r in lost if r.stage == "prep"][-1]  # what the new prep ran on
    assert {k: hardware[k] for k in ("host", "vcpus", "memory_mib", "accel")} == \
        {"host": [r.host for r in lost if r.stage == "prep"][-1], "vcpus": 1, "memory_mib": 384, "accel": "tcg"}
    organiser = vmjudge(b, "show", str(killed.entry_id), "--organiser", "--json").stdout
    assert "host-lost" in organiser  # the attempts, the lost one included, for the organiser
    status = vmjudge(b, "status").stdout
    assert "host hostA: stopped" in status and "host hostB: stopped" in status
