"""The hardware fingerprint each VM stage's manifest carries (vm/hardware.py), read from a real
libvirt connection (the test driver: no VM), and what `show` and the leaderboard make of it;
under a libvirt URI on another machine, that machine's facts as its libvirt gives them."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import libvirt
import pytest

from vmjudge.config import QueueSite, Site
from vmjudge.queue.db import Queue
from vmjudge.reports.leaderboard import leaderboard
from vmjudge.stages.context import StageContext
from vmjudge.vm import domain
from vmjudge.vm.channel import Transcript
from vmjudge.vm.hardware import cpu_model, fingerprint, libvirt_cpu, line
from vmjudge.vm.libvirt_uri import is_local
from vmjudge.vm.reading import JobRun

from .cli import run_cli
from .remote_libvirt import remote_test_uri


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


@pytest.mark.parametrize("uri, local", [
    ("qemu:///system", True), ("qemu:///session", True), ("qemu+unix:///system", True),
    ("qemu+unix:///system?socket=/run/libvirt/virtqemud-sock", True), ("test:///default", True),
    ("qemu+ssh://judge2/system", False), ("qemu+ssh://root@judge2:2222/system?keyfile=/k", False),
    ("qemu+tcp://10.0.0.2/system", False), ("qemu+tls://judge2.example.org/system", False),
    ("qemu://judge2/system", False),  # no transport but a host: libvirt uses TLS to it
    ("qemu://localhost/system", False),  # a host part, even this machine's: libvirt's facts are right here too
    ("qemu+ssh:///system", False),  # ssh with no host still leaves this process
    ("qemu+ext:///system?command=/usr/local/bin/tunnel", False),
])
def test_local_means_no_host_part_and_no_transport_but_the_local_socket(uri, local):
    assert is_local(uri) is local


def test_under_a_remote_uri_the_fingerprint_is_the_vm_hosts_as_libvirt_gives_it(tmp_path):
    """Through the remote protocol to libvirt's test driver (16 CPUs, a host without a CPU
    model): none of this machine's cpuinfo, core count or kernel may appear."""
    uri = remote_test_uri(tmp_path)
    conn = domain.connect(uri)
    try:
        site = Site(home=tmp_path, uri=uri, accel="kvm", queue=QueueSite(host="judge7"))
        found = fingerprint(conn, site, vcpus=2, memory_mib=2048)
        info, name = conn.getInfo(), conn.getHostname()
    finally:
        conn.close()
    assert info[2] == 16 != os.cpu_count()
    assert {k: found[k] for k in ("host", "vm_host", "cpu", "host_cores", "kernel", "vcpus")} == {
        "host": "judge7", "vm_host": name, "cpu": "unknown", "host_cores": 16, "kernel": "unknown", "vcpus": 2}
    assert line(found).startswith(f"judged on judge7 (its VMs on {name}): unknown (16 cores), qemu ")
    local = libvirt.open("test:///default")
    try:
        assert "vm_host" not in fingerprint(local, replace(site, uri="test:///default"), vcpus=2, memory_mib=2048)
    finally:
        local.close()


def test_a_remote_hosts_cpu_is_smbios_processor_name_else_libvirts_model(tmp_path):
    """The qemu driver's own capabilities (read-only, no VM) give a vendor and a model, which
    a remote host's fingerprint names when SMBIOS does not (this VM has no SMBIOS data)."""
    conn = libvirt.openReadOnly("qemu:///system")
    try:
        caps = ET.fromstring(conn.getCapabilities())
        try:
            smbios_name = ET.fromstring(conn.getSysinfo()).findtext("processor/entry[@name='version']")
        except libvirt.libvirtError:  # "Host SMBIOS information is not available" (a VM such as this one)
            smbios_name = None
        found = fingerprint(conn, Site(home=tmp_path, uri="qemu+ssh://judge2/system"), vcpus=1, memory_mib=512)
    finally:
        conn.close()
    vendor, model = caps.findtext("host/cpu/vendor"), caps.findtext("host/cpu/model")
    assert vendor and model and found["cpu"] == (smbios_name or f"{vendor} {model}")
    smbios = ET.fromstring(
        "<sysinfo type='smbios'><processor><entry name='socket_destination'>CPU0</entry>"
        "<entry name='manufacturer'>Intel(R) Corporation</entry>"
        "<entry name='version'>Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz</entry></processor></sysinfo>")
    assert libvirt_cpu(smbios, caps) == "Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz"
    unnamed = ET.fromstring("<sysinfo type='smbios'><processor><entry name='version'>Not Specified</entry>"
                            "</processor></sysinfo>")
    assert libvirt_cpu(unnamed, caps) == f"{vendor} {model}"
    assert libvirt_cpu(None, None) == "unknown"


T4 = {"state": "ok", "name": "Tesla T4", "memory_mib": 15360, "driver": "535.216.03"}


def test_a_gpu_stage_names_the_card_the_guest_found_in_its_hardware(tmp_path):
    """hardware["gpu"]: the guest's name and driver of the card lent to its VM, None in a VM
    that was lent none (even when its GPU image says what it found), and on `show`'s line."""
    conn = libvirt.open("test:///default")
    try:
        ran_on = fingerprint(conn, Site(home=tmp_path, accel="kvm", queue=QueueSite(host="judge7")), 1, 512)
    finally:
        conn.close()
    image = SimpleNamespace(key="g", manifest={"sha256": {}, "agent_version": "1.3", "gpu": {"driver": "nvidia-535"}})
    ctx = StageContext(site=SimpleNamespace(uri="qemu:///system", accel="kvm"), challenge=None, image=image,
                       entry=SimpleNamespace(id=1, archive_sha256="0" * 64), attempt=1)
    run = JobRun(domain="d", transcript=Transcript(nonce="n", hello={"nonce": "n", "agent": "1.3", "gpu": T4}),
                 iso_sha256="0" * 64, boot_seconds=1.0, total_seconds=2.0, hardware=ran_on)
    lent = replace(run, gpu={"address": "0000:3b:00.0", "ids": "10de:1eb8"})
    hardware = ctx.manifest("exam", lent)["hardware"]
    assert hardware == {**ran_on, "gpu": "Tesla T4 535.216.03"}
    assert line(hardware).endswith("under kvm, GPU Tesla T4 535.216.03")
    assert ctx.manifest("exam", run)["hardware"] == {**ran_on, "gpu": None}
    assert "GPU" not in line(ctx.manifest("exam", run)["hardware"])
