"""How much host memory a VM's qemu may hold: the domain's <memtune><hard_limit>.

libvirt writes it into the qemu process's memory cgroup (memory.max under cgroup v2,
memory.limit_in_bytes under v1), so a qemu that an escaped entry makes allocate without end
is killed by the host's kernel at that bound, not left to take the host's memory from every
other slot. It is set on each domain once started (or restored) and still paused, before the
guest runs (Domain.bound_memory, libvirt's setMemoryParameters), not written in the XML it starts
from: given a hard limit there, libvirt also raises qemu's locked-memory rlimit to it for every
VM (its qemumemlocktest, "pc-hardlimit"), which a libvirtd without CAP_SYS_RESOURCE cannot do,
and then no VM starts at all (tried: these machines' container has no CAP_SYS_RESOURCE). Set live,
it is the cgroup's limit alone, the same on every host (tried on 2026-11-26, libvirt 9.0: a cold VM
bounded live, paused and then running, kept qemu's locked-memory limit at the host's 8 MiB). The VM
booted to be saved as a warm state is not bounded: libvirt saves the live XML, and a state carrying a
hard limit fails to restore wherever the restore's XML keeps it ("cannot limit locked memory of
process ... Operation not permitted"), as in a CI run where another checkout sharing the images'
directory restored such a state (vm/warm.py drops any it finds, then bounds the restored VM). It runs
the judge's own image to its agent's ready frame, no entry. The bound is the guest's RAM plus what qemu
holds besides, measured by bench/qemu_memory.py (see MARGIN_MIB); a guest cannot make qemu hold more
of its RAM than it has.

- Under TCG qemu also holds the code it translated: its translation cache, which qemu sizes at
  1 GiB at most (min(1 GiB, host RAM / 8) on a 64-bit host) and fills as a guest runs new code,
  and beside it what it keeps per translated block and per page of guest code (its hash table of
  blocks, its page descriptors), which grows with the cache. The bound holds all of it, so no
  guest's code, however much, gets its qemu killed. Allowing for the cache alone was too tight:
  in test_sandbox_vm's limits test (a 512 MiB guest spawning 1024 processes, then filling its
  memory) qemu's anonymous memory reached 1722 MiB, 70 MiB below that bound (its cgroup's page
  cache 18 MiB then), and one of five runs there had its agent silent for 15 s (whether the
  cgroup's reclaim stalled it was not shown).
"""

from __future__ import annotations

# qemu's memory beyond guest RAM and TCG's translation cache. bench/qemu_memory.py measured 69-80 MiB
# on 2026-11-26 (qemu 7.2 under TCG; VMs of 384 MiB to 2 GiB, 1-2 vCPUs, cold and restored, the guest's
# memory filled): about three times that leaves room for what the bench did not do (heavy disk I/O
# through qcow2's caches, a state being saved), and is still small beside the guest's RAM.
MARGIN_MIB = 256
TCG_CACHE_MIB = 1024  # qemu's largest translation cache on a 64-bit host
# What TCG keeps beside its cache: in the limits test above, 1722 - 512 (guest RAM) - 1024 (the cache,
# at most) - 70 (what the bench measured besides) = at least 116 MiB; over four times that, as TCG
# runs only on trial hosts, where a tighter bound buys nothing.
TCG_BOOKKEEPING_MIB = 512
VFIO_MIB = 1024  # libvirt's own allowance beyond guest RAM for a VFIO device's locked memory


def hard_limit_mib(memory_mib: int, accel: str, gpu: bool) -> int:
    """The bound of a VM of `memory_mib` under `accel`, with or without a GPU."""
    tcg = TCG_CACHE_MIB + TCG_BOOKKEEPING_MIB if accel == "tcg" else 0
    return memory_mib + MARGIN_MIB + tcg + (VFIO_MIB if gpu else 0)
