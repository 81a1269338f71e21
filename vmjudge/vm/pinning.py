"""Which host cores each VM slot runs on, so that an entry's timings do not depend on what the
other slots are doing (issue #20: comparable timings).

The cores counted are those the daemon may use (its own CPU affinity, os.sched_getaffinity),
not every core of the host: an organiser who confines the daemon with `taskset` or a systemd
CPUAffinity= keeps its VMs inside that set too. When site.toml's [libvirt] uri names libvirt
on another machine (libvirt_uri.py), the daemon's affinity says nothing of that machine: the
cores counted are then those its libvirt reports online (getCPUMap), all of them, and the
<cputune> libvirt applies there pins the VMs to them as it would here.

How a slot's core set is sized: the usable cores are split evenly between the slots (CPU and
GPU slots alike, numbered as SlotPool numbers them), each slot getting `len(usable) // slots`
cores of its own, the leftover cores going to nobody. The split depends on the slot count
only, not on the challenges, so a slot's cores never change while the daemon runs, whichever
challenge its next stage belongs to. The VMs must fit: the daemon and the doctor refuse a
site where slots × vCPUs (the largest [vm] vcpus among the challenges registered) exceed the
usable cores, which is the same as a slot's share being smaller than that largest VM.
At claim time each VM is pinned for its own vcpus: vCPU j on the j-th core of its slot,
qemu's emulator threads on all of the slot's cores (its spare ones, when the VM is smaller
than the slot). A challenge registered after the daemon started, larger than its slot, has
its vCPUs laid round-robin over the slot's own cores: it slows itself, never another slot.

With `overcommit = true` and too few cores, every slot's VMs float over all the usable cores
(each vCPU and the emulator pinned to the whole usable set) rather than shared round-robin:
the timings are not comparable either way, a round-robin split would give some slots a whole
core and others half of one (3 slots on 2 cores) so that a run's time would depend on its
slot number, while the kernel's scheduler balances floating vCPUs by load; and pinning them
to the usable set rather than leaving them unpinned keeps them off cores the daemon was not
given.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import libvirt

from ..errors import ConfigError


class Overcommitted(ConfigError):
    """slots × vCPUs exceed the usable cores and the site does not allow overcommit."""


def usable_cores() -> tuple[int, ...]:
    """The cores this process may run on: the daemon's, which its VMs must keep to."""
    return tuple(sorted(os.sched_getaffinity(0)))


def online_cores(conn: libvirt.virConnect, uri: str) -> tuple[int, ...]:
    """The cores a remote VM host's libvirt reports online; ConfigError (one sentence) when it
    will not say, as its VMs could then not be pinned to cores of their own."""
    try:
        _, online, _ = conn.getCPUMap()
    except libvirt.libvirtError as exc:
        raise ConfigError(f"libvirt at {uri} would not say which of its host's cores are online "
                          f"({exc.get_error_message()}), so its VMs cannot be pinned to cores of their own.") from None
    return tuple(core for core, up in enumerate(online) if up)


def cpuset(cores: tuple[int, ...]) -> str:
    """libvirt's spelling of a set of cores, consecutive ones as a range: "0-3,6"."""
    runs: list[list[int]] = []
    for core in sorted(set(cores)):
        if runs and core == runs[-1][1] + 1:
            runs[-1][1] = core
        else:
            runs.append([core, core])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


@dataclass(frozen=True)
class CpuTune:
    """A VM's <cputune>: the cpuset of each vCPU in order, and of qemu's emulator threads."""

    vcpus: tuple[str, ...]
    emulator: str


@dataclass(frozen=True)
class SlotCores:
    """One slot's cores, and whether other slots share them (an overcommitted plan)."""

    cores: tuple[int, ...]
    shared: bool = False

    def tune(self, vcpus: int) -> CpuTune:
        """A VM of `vcpus` in this slot. Its own cores: vCPU j on the j-th (round-robin when the
        VM is larger than its slot), the emulator threads on all of them. Shared cores: every
        vCPU and the emulator float over the whole set, since one core each would pile the
        slots' vCPUs onto the first cores."""
        if not self.cores:
            raise ValueError("a slot without cores cannot be pinned")
        every = cpuset(self.cores)
        if self.shared:
            return CpuTune(tuple(every for _ in range(vcpus)), every)
        return CpuTune(tuple(cpuset((self.cores[j % len(self.cores)],)) for j in range(vcpus)), every)


@dataclass(frozen=True)
class CorePlan:
    """Each slot's cores (index = slot number), and whether they are shared (overcommit)."""

    usable: tuple[int, ...]
    slots: tuple[tuple[int, ...], ...]
    vcpus: int  # the largest VM the plan was made for
    shared: bool

    def of(self, slot: int) -> SlotCores:
        return SlotCores(self.slots[slot], self.shared)

    def notice(self) -> str:
        """The daemon's first line when the plan is shared."""
        return (f"timings are not comparable: {len(self.slots)} slot(s) × {self.vcpus} vCPU(s) exceed the "
                f"{len(self.usable)} usable core(s), so the slots share cores (site.toml [slots] overcommit = true).")

    def describe(self) -> str:
        """The doctor's line: which cores each slot gets, so an organiser can check it against taskset."""
        if self.shared:
            return (f"overcommitted: {len(self.slots)} slot(s) × {self.vcpus} vCPU(s) on {len(self.usable)} usable "
                    f"core(s) ({cpuset(self.usable)}), shared by every slot; timings are not comparable")
        each = ", ".join(f"slot {i}: {cpuset(c)}" for i, c in enumerate(self.slots))
        return (f"{len(self.slots)} slot(s) × {self.vcpus} vCPU(s) on {len(self.usable)} usable core(s), "
                f"each slot on its own ({each})")


def plan_cores(usable: tuple[int, ...], slots: int, vcpus: int, overcommit: bool) -> CorePlan:
    """Each of `slots` slots its own `len(usable) // slots` cores when a VM of `vcpus` fits in
    that share; otherwise Overcommitted, or with `overcommit` every slot on all usable cores."""
    if slots < 1 or vcpus < 1 or not usable:
        raise ValueError(f"a plan needs slots, vCPUs and cores: {slots}, {vcpus}, {usable!r}")
    share = len(usable) // slots
    if share >= vcpus:
        return CorePlan(usable, tuple(usable[i * share:(i + 1) * share] for i in range(slots)), vcpus, False)
    if not overcommit:
        fewer = (f"--slots {len(usable) // vcpus} or fewer (GPU slots count), fewer [vm] vcpus"
                 if len(usable) >= vcpus else f"[vm] vcpus = {len(usable)} or fewer")
        raise Overcommitted(
            f"{slots} slot(s) × {vcpus} vCPU(s) need {slots * vcpus} cores but vmjudge may use {len(usable)} "
            f"({cpuset(usable)}), so the slots would share cores and timings would not be comparable: use {fewer}, "
            "or set overcommit = true under [slots] in site.toml.")
    return CorePlan(usable, tuple(usable for _ in range(slots)), vcpus, True)
