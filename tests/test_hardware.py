"""The hardware fingerprint each VM stage's manifest carries (vm/hardware.py), read from a real
libvirt connection (the test driver: no VM), and what `show` and the leaderboard make of it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import libvirt

from vmjudge.config import QueueSite, Site
from vmjudge.queue.db import Queue
from vmjudge.reports.leaderboard import leaderboard
from vmjudge.vm.hardware import cpu_model, fingerprint, line

from .cli import run_cli


def test_the_fingerprint_names_host_cpu_versions_and_the_vms_size(tmp_path):
    conn = libvirt.open("test:///default")
    try:
        site = Site(home=tmp_path, accel="tcg", queue=QueueSite(host="judge7"))
        found = fingerprint(conn, site, vcpus=2, memory_mib=2048)
        major, minor, release = conn.getLibVersion() // 1_000_000, conn.getLibVersion() // 1000 % 1000, \
            conn.getLibVersion() % 1000
    finally:
        conn.close()
    assert found["libvirt"] == f"{major}.{minor}.{release}"
    assert found["qemu"].count(".") == 2
    assert {k: found[k] for k in ("host", "vcpus", "memory_mib", "accel", "host_cores", "kernel")} == {
        "host": "judge7", "vcpus": 2, "memory_mib": 2048, "accel": "tcg", "host_cores": os.cpu_count(),
        "kernel": os.uname().release}
    assert found["cpu"] == cpu_model() != ""


def test_the_cpu_model_is_read_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Gold 6230 @ 2.10GHz\n")
    assert cpu_model(info) == "Intel(R) Xeon(R) Gold 6230 @ 2.10GHz"
    assert cpu_model(tmp_path / "missing") == "unknown"


HARDWARE = {"host": "judge7", "cpu": "Xeon", "host_cores": 8, "kernel": "6.1.0", "qemu": "7.2.0", "libvirt": "9.0.0",
            "vcpus": 1, "memory_mib": 384, "accel": "kvm", "gpu": None}


def scored_entry(queue: Queue, owner: str, archive: Path) -> int:
    eid = queue.add_entry("c", owner, False, "ab" * 32, f"{owner}-entry.zip", archive)
    for stage, following in (("prep", "quiz"), ("quiz", "exam"), ("exam", "score")):
        queue.claim_next(only=eid)
        run = queue.start_stage(eid, stage, 0)
        queue.finish_stage(run, "passed", "ok", {"stage": stage, "hardware": HARDWARE}, next_stage=following)
    queue.claim_next(only=eid)
    queue.finish_stage(queue.start_stage(eid, "score", 0), "scored", "ok", {}, outcome="scored", scores={"score": 0.5})
    return eid


def test_show_prints_where_it_ran_and_the_leaderboard_carries_the_exams_host(tmp_path):
    queue = Queue(tmp_path / "queue.db")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "challenge.toml").write_text('name = "c"\n')
    queue.add_challenge("c", tmp_path / "c", "key")
    eid = scored_entry(queue, "ann", tmp_path / "x.zip")
    shown = run_cli("show", str(eid), home=tmp_path).stdout
    assert line(HARDWARE) in shown
    assert line(HARDWARE) == ("judged on judge7: Xeon (8 cores), qemu 7.2.0, libvirt 9.0.0, kernel 6.1.0; VM of 1 vCPU "
                              "and 384 MiB under kvm")
    assert json.loads(run_cli("show", str(eid), "--json", home=tmp_path).stdout)["hardware"] == HARDWARE
    [row] = leaderboard(queue, "c")
    assert (row.exam_host, row.exam_hardware) == (queue.host, HARDWARE)
    board = json.loads(run_cli("leaderboard", "c", "--json", "--organiser", home=tmp_path).stdout)
    assert board[0]["exam_host"] == queue.host and board[0]["exam_hardware"]["cpu"] == "Xeon"
    # Participants get neither, and the row only from the entry's publish time (its exam took no time here).
    with queue.database.transaction() as db:
        db.execute("UPDATE entries SET published = 0 WHERE id = ?", (eid,))
    board = json.loads(run_cli("leaderboard", "c", "--json", home=tmp_path).stdout)
    assert [sorted(row) for row in board] == [["entry_id", "owner", "rank", "score", "scores", "submitted_at"]]


def test_a_connection_that_no_longer_answers_gives_unknown_versions_not_a_failed_stage(tmp_path):
    """libvirtd may restart while a VM runs (test_infra_faults): the fingerprint is taken before
    the VM starts, and a version libvirt cannot give is "unknown", never an error."""
    conn = libvirt.open("test:///default")
    conn.close()  # every call on it now raises libvirtError
    found = fingerprint(conn, Site(home=tmp_path, accel="kvm"), vcpus=1, memory_mib=512)
    assert (found["qemu"], found["libvirt"], found["vcpus"]) == ("unknown", "unknown", 1)
