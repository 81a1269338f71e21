"""#33 in real VMs: while a stage's VM runs, its qemu process is confined and its memory bounded.

Read from the host while the VM runs (run_job's on_start, as doctor reads it): a non-root uid,
CapEff 0, NoNewPrivs 1, Seccomp 2, a command line whose devices are exactly the allow-list's,
and the domain's <memtune><hard_limit> set and equal to qemu's memory cgroup limit (cgroup v1's
memory.limit_in_bytes on this project's machines, v2's memory.max elsewhere). Once cold, and once
restored from a warm state, which must keep the bound. The job fills the guest's memory as far as
the entry may, so the bound is shown not to kill a VM that uses all it has.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from vmjudge.supervisor.confinement import Observed, observe
from vmjudge.vm.devices import QEMU_DEVICES, qemu_devices, unlisted_qemu
from vmjudge.vm.job import Command, Job
from vmjudge.vm.memory import hard_limit_mib
from vmjudge.vm.pinning import SlotCores
from vmjudge.vm.runner import make_blank_disk, run_job

from .conftest import TEST_LIMITS

FILL = ("chunks = []\nwhile True:\n    chunks.append(bytearray(b'\\x01') * (8 << 20))\n")
MEMORY = 512


def stage_vm(conn, site, image, rundir, warm: bool) -> tuple[Observed, object]:
    """A VM as VmRunner starts a stage's (home disk, its slot's cores), read while it runs."""
    seen: list[Observed] = []
    home = rundir / "home.qcow2"
    make_blank_disk(home, 64)
    job = Job(commands=(Command("fill", ("python3", "-c", FILL), 300.0), Command("alive", ("echo", "alive"), 30.0)))
    run = run_job(conn, replace(site, warm_start=warm), image, job, home_disk=home, workdir=rundir,
                  console_log=rundir / "console.log", vcpus=1, memory_mib=MEMORY, label="confined",
                  limits=TEST_LIMITS, cores=SlotCores((0,)),
                  on_start=lambda dom: seen.append(observe(conn, dom, gpu=False)))
    assert len(seen) == 1
    return seen[0], run


def assert_confined(seen: Observed, accel: str) -> None:
    q = seen.qemu
    assert q.uid != 0 and q.gid != 0
    assert (q.cap_eff, q.no_new_privs, q.seccomp) == (0, 1, 2)
    assert unlisted_qemu(q.argv, gpu=False) == []
    assert set(qemu_devices(q.argv)) == QEMU_DEVICES  # exactly the allow-list: the virtio channel's CPU VM
    limit = hard_limit_mib(MEMORY, accel, gpu=False)
    assert seen.hard_limit_kib == limit * 1024
    assert q.memory_limit == limit * 2**20, (q.memory_limit, q.limit_file)
    assert q.limit_file is not None and q.limit_file.endswith(("memory.limit_in_bytes", "memory.max"))


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_a_stage_vms_qemu_is_confined_and_bounded(conn, site, image, rundir, warm):
    seen, run = stage_vm(conn, site, image, rundir, warm)
    assert run.start["mode"] == ("warm" if warm else "cold"), run.start
    assert_confined(seen, site.accel)
    if warm:
        assert "-incoming" in seen.qemu.argv  # the restored qemu, read after the restore
    # The guest used all the memory its entry may (the filler was killed inside the guest, by its
    # cgroup), and qemu, inside its bound, carried on to the next command.
    fill, alive = run.transcript.commands
    assert fill.status != "ok" and bytes(alive.output) == b"alive\n" and run.ended == "bye"
