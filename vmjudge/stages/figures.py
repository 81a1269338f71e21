"""What a stage's run used, measured, with the limits it was held to: the record kept with its
stage run for organisers, and from which reports/figures.py says what participants may see.

The per-command figures come from the guest kernel (each entry command's own cgroup: CPU,
peak memory, OOM kills, processes at most, and CPU and memory sampled over time); the VM's
wall and CPU time from the host (libvirt), where the guest cannot alter them. Nothing here
decides who sees what: the exam's figures are kept whole, per record, and reports/figures.py
reduces them for participants.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..vm.channel import figure
from ..vm.reading import JobRun
from .context import StageContext

MIB = 1 << 20


def measured(ctx: StageContext, run: JobRun, names: Sequence[str], command_limit: float,
             stage_limit: float | None) -> dict[str, Any]:
    """The figures of `run`: one row per command that ran (`names` gives each a name: the
    record, or "setup.sh"), the stage's own time against `stage_limit` (from the guest's hello,
    as the host holds the cap), and the VM's."""
    ch = ctx.challenge
    bye = run.transcript.bye or {}
    rows = []
    for cmd in run.transcript.commands:
        if cmd.status == "running":  # stopped by the host mid-command (the quiz's mismatch, a cap)
            continue
        usage = cmd.usage or {}
        rows.append({"name": names[cmd.index] if cmd.index < len(names) else cmd.name, "status": cmd.status,
                     "seconds": round(cmd.seconds, 3), **{k: usage.get(k) for k in
                                                         ("cpu_seconds", "peak_memory", "oom_kills", "processes")},
                     # its use over time: [[seconds, CPU seconds, memory bytes(, GPU memory bytes)], ...]
                     # (vm/samples.py)
                     **({"samples": [list(s) for s in cmd.samples]} if cmd.samples else {})})
    return {
        "commands": rows,
        "command_limit": command_limit,
        "stage_seconds": stage_seconds(run),
        "stage_limit": stage_limit,
        "memory_limit": figure(bye.get("memory_max")),  # the entry's cgroup cap, below the VM's memory
        "vm_memory": ch.vm.memory_mib * MIB,
        "instance": ch.vm.instance,  # the cloud instance the VM mirrors ([vm] instance), or None
        **({"gpu_memory": gpu} if (gpu := gpu_memory(run)) else {}),
        "home_used": figure(bye.get("home_used")),
        "home_size": ch.vm.home_mib * MIB,
        "vm": {"wall_seconds": round(run.total_seconds, 3), "boot_seconds": round(run.boot_seconds, 3),
               "cpu_seconds": None if run.cpu_seconds is None else round(run.cpu_seconds, 3),
               "vcpus": ch.vm.vcpus},
    }


def gpu_memory(run: JobRun) -> float | None:
    """The card's memory in bytes, as the guest's hello said it (nvidia-smi's memory.total): the
    limit drawn beside a GPU stage's samples. None without a working card."""
    card = (run.transcript.hello or {}).get("gpu")
    mib = figure(card.get("memory_mib")) if isinstance(card, dict) and card.get("state") == "ok" else None
    return mib * MIB if mib else None


def stage_seconds(run: JobRun) -> float | None:
    """From the guest's hello to its last frame, as the host saw them arrive: the span the
    stage's cap holds (boot and power-off are the judge's, not the entry's). None when the
    guest never said hello: not measured, which reports say as unknown (0 would read as
    "0/10 of the cap")."""
    times = [arrived for _, kind, arrived in run.transcript.timeline]
    hello = next((arrived for _, kind, arrived in run.transcript.timeline if kind == "hello"), None)
    return round(max(times[-1] - hello, 0.0), 3) if hello is not None else None
