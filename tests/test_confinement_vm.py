"""#33 in real VMs: while a stage's VM runs, its qemu process is confined and its memory bounded.

Read from the host while the VM runs (run_job's on_start, as doctor reads it): a non-root uid,
no capabilities (CapEff and CapPrm 0), NoNewPrivs 1, Seccomp 2, a command line whose devices are
exactly the allow-list's, a running domain (what was hot-plugged into it included) with only
allowed devices, and the domain's <memtune><hard_limit> set and equal to the limit of qemu's own
memory cgroup (cgroup v1's memory.limit_in_bytes on this project's machines, v2's memory.max
elsewhere). The VM carries a container entry's root as a stage of one does (a disk of its own).
Once cold, and once warm: the warm state made in the run (its saving VM unbounded, so that the state
carries no <memtune> for a restore to raise qemu's locked-memory limit to) and restored, then bounded
before it resumes, its disks given after the restore.
The job fills the guest's memory as far as the entry may, so the bound is shown not to kill a VM
that uses all it has. Two VM runs in all: each check is made on both.
"""

from __future__ import annotations

import subprocess
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from vmjudge.supervisor.confinement import Observed, observe
from vmjudge.vm import warm
from vmjudge.vm.devices import QEMU_DEVICES, qemu_devices, unlisted_kinds, unlisted_qemu
from vmjudge.vm.job import Command, Job
from vmjudge.vm.memory import hard_limit_mib
from vmjudge.vm.pinning import SlotCores
from vmjudge.vm.reading import JobRun
from vmjudge.vm.runner import make_blank_disk, run_job

from .conftest import TEST_LIMITS

FILL = ("chunks = []\nwhile True:\n    chunks.append(bytearray(b'\\x01') * (8 << 20))\n")
MEMORY = 512


def entry_root(rundir: Path) -> Path:
    """A container entry's root as the host keeps one: a squashfs, root's, 0600."""
    tree = rundir / "tree"
    (tree / "etc").mkdir(parents=True)
    (tree / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    path = rundir / "root.sqfs"
    subprocess.run(["mksquashfs", str(tree), str(path), "-noappend", "-quiet", "-no-progress"], check=True)
    path.chmod(0o600)
    return path


def stage_vm(conn, site, image, rundir: Path, warm_start: bool) -> tuple[Observed, str, JobRun]:
    """A VM as VmRunner starts a stage's (home disk, a container entry's root, its slot's cores),
    read while it runs; with the domain's name."""
    seen: list[tuple[Observed, str]] = []
    home = rundir / "home.qcow2"
    make_blank_disk(home, 64)
    job = Job(commands=(Command("fill", ("python3", "-c", FILL), 300.0), Command("alive", ("echo", "alive"), 30.0)),
              entry_root=entry_root(rundir))
    run = run_job(conn, replace(site, warm_start=warm_start), image, job, home_disk=home, workdir=rundir,
                  console_log=rundir / "console.log", vcpus=1, memory_mib=MEMORY, label="confined",
                  limits=TEST_LIMITS, cores=SlotCores((0,)),
                  on_start=lambda dom: seen.append((observe(conn, dom, gpu=False), dom.name)))
    assert len(seen) == 1
    return seen[0][0], seen[0][1], run


def hard_limit_of(xml: str) -> int | None:
    limit = ET.fromstring(xml).find("memtune/hard_limit")
    return None if limit is None else int(limit.text or 0) * {"KiB": 1, "MiB": 1024}[limit.get("unit", "KiB")]


def assert_confined(seen: Observed, name: str, accel: str) -> None:
    q = seen.qemu
    assert q.uid != 0 and q.gid != 0
    assert (q.cap_eff, q.cap_prm, q.no_new_privs, q.seccomp) == (0, 0, 1, 2)
    assert unlisted_qemu(q.argv, gpu=False) == []
    assert set(qemu_devices(q.argv)) == QEMU_DEVICES  # exactly the allow-list: the virtio channel's CPU VM
    assert unlisted_kinds(seen.live_devices, implicit=True) == []
    live = Counter(seen.live_devices)  # the image's root, the home disk, the entry's root; the job's CD
    assert (live["disk/disk/virtio"], live["disk/cdrom/ide"]) == (3, 1), seen.live_devices
    limit = hard_limit_mib(MEMORY, accel, gpu=False)
    assert seen.hard_limit_kib == limit * 1024
    assert q.memory_limit == limit * 2**20, (q.memory_limit, q.limit_file)
    assert q.limit_file is not None and q.limit_file.endswith(("memory.limit_in_bytes", "memory.max"))
    cgroup = Path(q.limit_file).parent.name  # the domain's own, not a parent's (systemd escapes its dashes)
    assert name in cgroup or name.replace("-", "\\x2d") in cgroup, q.limit_file


@pytest.mark.parametrize("warm_start", [False, True], ids=["cold", "warm"])
def test_a_stage_vms_qemu_is_confined_and_bounded(conn, site, image, rundir, warm_start):
    if warm_start:  # the state made in this run, so that its saving VM is the one this code makes
        with warm.seat(site, image, warm.Shape(site.accel, 1, MEMORY)) as seat:
            assert seat is not None
            seat.discard()
    seen, name, run = stage_vm(conn, site, image, rundir, warm_start)
    assert run.start["mode"] == ("warm" if warm_start else "cold"), run.start
    assert_confined(seen, name, site.accel)
    argv_disks = qemu_devices(seen.qemu.argv).count("virtio-blk-pci")
    if warm_start:
        assert "-incoming" in seen.qemu.argv  # the restored qemu, read after the restore
        assert argv_disks == 1  # the home disk and the entry's root were given after: seen in the running domain
        assert str(run.start["state"]).startswith("made for this run"), run.start
        state = site.layout.warm / image.key / warm.Shape(site.accel, 1, MEMORY).key / f"seat-{run.start['seat']}.save"
        assert hard_limit_of(conn.saveImageGetXMLDesc(str(state))) is None  # bounded once restored, not saved so
    else:
        assert argv_disks == 3
    # The guest used all the memory its entry may (the filler was killed inside the guest, by its
    # cgroup), and qemu, inside its bound, carried on to the next command.
    fill, alive = run.transcript.commands
    assert fill.status != "ok" and bytes(alive.output) == b"alive\n" and run.ended == "bye"
