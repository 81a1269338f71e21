"""Comparable timings (#20) in a real VM: the domain libvirt runs has each vCPU and the
emulator threads on the cores its slot was given, read back from libvirt while the guest's
command runs (Watch.on_end fires before the agent powers the VM off)."""

from __future__ import annotations

import libvirt

from vmjudge.vm import domain
from vmjudge.vm.channel import CommandResult, Watch
from vmjudge.vm.job import Command, Job
from vmjudge.vm.pinning import plan_cores, usable_cores
from vmjudge.vm.runner import make_blank_disk, run_job

from .conftest import TEST_LIMITS


def cpumap(cpuset: str, host_cpus: int) -> tuple[bool, ...]:
    """libvirt's map of a cpuset as pinning.py writes it ("1", "0-3,6")."""
    chosen: set[int] = set()
    for part in cpuset.split(","):
        first, _, last = part.partition("-")
        chosen.update(range(int(first), int(last or first) + 1))
    return tuple(cpu in chosen for cpu in range(host_cpus))


def test_the_running_vm_is_pinned_to_its_slots_cores(conn, site, image, rundir):
    """Slot 1 of two 1-vCPU slots: on a host with 2 usable cores or more, its own core(s) and
    none of slot 0's (on a 1-core host the plan is overcommitted and both float)."""
    plan = plan_cores(usable_cores(), 2, 1, overcommit=True)
    cores = plan.of(1)
    tune = cores.tune(1)
    seen: dict[str, object] = {}

    def read_pinning(_result: CommandResult) -> bool:
        # The session holds the host: the one VM is this run's, booted or restored from a warm state.
        names = [d for d in conn.listAllDomains() if d.name().startswith(domain.DOMAIN_PREFIX)]
        assert len(names) == 1
        dom: libvirt.virDomain = names[0]
        seen["vcpus"], seen["emulator"] = dom.vcpuPinInfo(0), dom.emulatorPinInfo(0)
        return False

    home = rundir / "home.qcow2"
    make_blank_disk(home, 64)
    run = run_job(conn, site, image, Job(commands=(Command("nproc", ("nproc",), 20),)), home_disk=home,
                  workdir=rundir, console_log=rundir / "console.log", vcpus=1, memory_mib=512, label="test-pin",
                  limits=TEST_LIMITS, watch=Watch(on_end=read_pinning), cores=cores)
    assert bytes(run.transcript.commands[0].output).strip() == b"1"
    assert run.start["mode"] == "warm", run.start  # a restored VM is pinned as its run's slot says
    host_cpus = conn.getInfo()[2]
    assert tuple(map(tuple, seen["vcpus"])) == tuple(cpumap(c, host_cpus) for c in tune.vcpus)
    assert tuple(seen["emulator"]) == cpumap(tune.emulator, host_cpus)
    if not plan.shared:
        on = {cpu for cpu, pinned in enumerate(seen["emulator"]) if pinned}
        assert on == set(cores.cores) and not on & set(plan.of(0).cores)
