"""Comparable timings (#20), on the host only: the daemon and the doctor refuse a site whose
slots × vCPUs exceed the cores vmjudge may use, unless site.toml says [slots] overcommit =
true; the daemon then says first that its timings are not comparable. `taskset -c 0` gives
the command one usable core whatever the machine has; both checks run before any VM starts,
and libvirt is its test driver. Under a libvirt URI on another machine the cores split are
that machine's online ones, as its libvirt reports them (the test driver through the remote
protocol: cores 0, 2 and 4), whatever taskset gives the daemon here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vmjudge.queue.db import Queue

from .cli import run_cli
from .remote_libvirt import remote_test_uri

TEST_DRIVER = {"VMJUDGE_URI": "test:///default", "VMJUDGE_ACCEL": "tcg"}
REFUSED = ("2 slot(s) × 1 vCPU(s) need 2 cores but vmjudge may use 1 (0), so the slots would share cores and timings "
           "would not be comparable: use --slots 1 or fewer (GPU slots count), fewer [vm] vcpus, or set overcommit = "
           "true under [slots] in site.toml.")


@pytest.fixture
def home(tmp_path):
    path = tmp_path / "home"
    path.mkdir()
    return path


def one_core_cli(*args: str, home: Path):
    return run_cli(*args, home=home, env=TEST_DRIVER, prefix=("taskset", "-c", "0"))


def test_the_daemon_refuses_more_slots_than_cores_before_anything_starts(home):
    proc = one_core_cli("daemon", "--slots", "2", "--until-idle", home=home)
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == f"vmjudge: {REFUSED}\n"
    assert not (home / "daemon.lock").exists()  # refused before the lock: nothing was started


def test_with_overcommit_the_daemon_starts_and_says_first_its_timings_are_not_comparable(home):
    (home / "site.toml").write_text("[slots]\novercommit = true\n")
    proc = one_core_cli("daemon", "--slots", "2", "--until-idle", home=home)
    assert proc.returncode == 0, proc.stderr
    first = proc.stderr.splitlines()[0]
    assert first == ("WARNING timings are not comparable: 2 slot(s) × 1 vCPU(s) exceed the 1 usable core(s), so the "
                     "slots share cores (site.toml [slots] overcommit = true).")


def test_one_slot_that_fits_starts_without_a_word_of_it(home):
    proc = one_core_cli("daemon", "--slots", "1", "--until-idle", home=home)
    assert proc.returncode == 0, proc.stderr
    assert "not comparable" not in proc.stderr


def test_the_largest_registered_challenge_sizes_the_slots(home, tmp_path):
    """A challenge of 2 vCPUs registered: one slot no longer fits one core."""
    big = tmp_path / "big"
    big.mkdir()
    (big / "challenge.toml").write_text('name = "big"\n[vm]\nvcpus = 2\n')
    run_cli("status", home=home)  # makes the queue
    Queue(home / "queue.db").add_challenge("big", big, "key")
    proc = one_core_cli("daemon", "--slots", "1", "--until-idle", home=home)
    assert proc.returncode == 1
    assert proc.stderr.startswith("vmjudge: 1 slot(s) × 2 vCPU(s) need 2 cores but vmjudge may use 1 (0)")
    assert "use [vm] vcpus = 1 or fewer, or set overcommit = true" in proc.stderr
    doctor = json.loads(one_core_cli("doctor", "--json", home=home).stdout)
    cores = {c["name"]: c for c in doctor["checks"]}["cores"]
    assert not cores["ok"] and cores["detail"].startswith("1 slot(s) × 2 vCPU(s) need 2 cores")


def test_the_doctor_refuses_the_same_in_one_sentence_and_tries_no_boot(home):
    proc = one_core_cli("doctor", "--slots", "2", home=home)
    assert proc.returncode == 1
    lines = {line.split()[1]: line for line in proc.stdout.splitlines()}
    assert lines["cores"] == f"FAIL  cores      {REFUSED}"
    assert lines["accel"].startswith("FAIL") and "not tried" in lines["accel"]


def test_the_doctor_passes_the_cores_with_one_slot_or_with_overcommit(home):
    checks = {c["name"]: c for c in json.loads(one_core_cli("doctor", "--json", home=home).stdout)["checks"]}
    assert checks["cores"] == {"name": "cores", "ok": True, "warn": False,
                               "detail": "1 slot(s) × 1 vCPU(s) on 1 usable core(s), each slot on its own (slot 0: 0)"}
    (home / "site.toml").write_text("[slots]\novercommit = true\n")
    checks = {c["name"]: c for c in json.loads(one_core_cli("doctor", "--slots", "3", "--json", home=home).stdout)
              ["checks"]}
    assert checks["cores"]["ok"] and checks["cores"]["detail"] == (
        "overcommitted: 3 slot(s) × 1 vCPU(s) on 1 usable core(s) (0), shared by every slot; timings are not "
        "comparable")


def test_doctor_and_service_install_take_the_same_slots_option(home):
    for command in (("doctor",), ("service", "install")):
        proc = run_cli(*command, "--slots", "0", home=home, env=TEST_DRIVER)
        assert proc.returncode == 2 and "0 is not in the range 1<=x<=64" in proc.stderr, proc.stderr


def test_under_a_remote_uri_the_slots_split_the_vm_hosts_online_cores_not_the_daemons(home, tmp_path):
    remote = {"VMJUDGE_URI": remote_test_uri(tmp_path), "VMJUDGE_ACCEL": "tcg"}
    proc = run_cli("daemon", "--slots", "2", "--until-idle", home=home, env=remote, prefix=("taskset", "-c", "0"))
    assert proc.returncode == 0, proc.stderr  # one core here, but 3 on the VM host: 2 slots fit
    assert "not comparable" not in proc.stderr
    doctor = run_cli("doctor", "--slots", "2", "--json", home=home, env=remote, prefix=("taskset", "-c", "0"))
    cores = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}["cores"]
    assert cores == {"name": "cores", "ok": True, "warn": False,
                     "detail": f"on the VM host at {remote['VMJUDGE_URI']}: 2 slot(s) × 1 vCPU(s) on 3 usable core(s), "
                     "each slot on its own (slot 0: 0, slot 1: 2)"}
    proc = run_cli("daemon", "--slots", "4", "--until-idle", home=home, env=remote)
    assert (proc.returncode, proc.stderr.splitlines()[0]) == (
        1, "vmjudge: 4 slot(s) × 1 vCPU(s) need 4 cores but vmjudge may use 3 (0,2,4), so the slots would share "
           "cores and timings would not be comparable: use --slots 3 or fewer (GPU slots count), fewer [vm] vcpus, or "
           "set overcommit = true under [slots] in site.toml.")


def test_the_doctor_names_a_remote_libvirt_that_does_not_answer_for_its_cores(home, tmp_path):
    gone = {"VMJUDGE_URI": f"test+ext:///default?command={tmp_path / 'no-such-proxy'}", "VMJUDGE_ACCEL": "tcg"}
    checks = {c["name"]: c for c in json.loads(run_cli("doctor", "--json", home=home, env=gone).stdout)["checks"]}
    assert not checks["libvirt"]["ok"]
    assert checks["cores"] == {"name": "cores", "ok": False, "warn": False,
                               "detail": f"libvirt at {gone['VMJUDGE_URI']} did not answer, so its host's cores are "
                               "unknown."}
