"""The judge's CPU level on the replica: written into it when it is built, and compared with the
participant's machine when `vmjudge-replica check` runs there.

The replica runs entries on the participant's own CPU, not in the judge's VM. Maths libraries
choose their code by CPU feature, so outputs made on a machine of another x86-64 level than the
judge's guests can differ in their last digits (and a binary built for AVX2 stops with "Illegal
instruction" on a machine without it); the quiz compares them byte for byte. So the replica
says which level the judge gives, and the check warns, before its report, when this machine
offers less or more. Only the standard library and config/cpu.py (pure) are used: this runs in
the replica.
"""

from __future__ import annotations

from typing import Any

from ..config.cpu import level_of, rank
from ..images.guest.cpu import read_cpu


def judge_cpu(setting: str | None, level: str | None, flags: frozenset[str] | set[str] = frozenset(),
              required: str | None = None) -> dict[str, Any]:
    """What replica.json records: the judge's [vm] cpu, the level its guests get (None: libvirt
    did not say when the replica was built), whether they have AVX, AVX2 and FMA, and the
    challenge's own [vm] cpu_level."""
    return {"setting": setting, "level": level, "required": required,
            "avx_avx2_fma": [f in flags for f in ("avx", "avx2", "fma")] if flags else None}


def readme_text(judge: dict[str, Any]) -> str:
    """The replica README's paragraph on the CPU."""
    level = judge.get("level")
    if level is None:
        said = ("The judge did not record which CPU level its VMs give (libvirt did not say when this replica was "
                "built).")
    else:
        said = f"The judge's VMs give entries a CPU of level {level} (site setting cpu = \"{judge.get('setting')}\")."
    if judge.get("required"):
        said += f" This challenge requires at least {judge['required']}: entries may use it."
    return (f"\n  CPU: {said}\n  Programs can print other last digits on a CPU of another level (maths libraries pick "
            "their code by CPU\n  feature), and the quiz compares outputs byte for byte: make your submitted outputs "
            "on a machine of\n  the judge's level. `vmjudge-replica check` warns when this machine's level differs.\n")


def warning(judge: dict[str, Any] | None, cpuinfo: str = "/proc/cpuinfo") -> str | None:
    """One sentence when this machine's x86-64 level is not the judge's, else None."""
    theirs = (judge or {}).get("level")
    if not theirs:
        return None
    here = level_of(frozenset(read_cpu(cpuinfo)["flags"]))
    if rank(here) == rank(theirs):
        return None
    what = "less" if rank(here) < rank(theirs) else "more"
    return (f"Warning: this machine's CPU is {here or 'below x86-64-v1'}, {what} than the judge's {theirs}: outputs "
            "can differ in their last digits (or a program built for another level fail), so make the outputs you "
            f"submit on a machine of {theirs}.")
