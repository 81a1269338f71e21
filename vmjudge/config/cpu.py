"""The guest's CPU as the organiser writes it down: site.toml's [vm] cpu (what every guest of
this host gets) and challenge.toml's [vm] cpu_level (the least a challenge's entries may get).

Libraries pick their code paths by the CPU's features (glibc's libm, NumPy, OpenBLAS), and
wheels built for today's CPUs stop with "Illegal instruction" without AVX: so what an entry
was built for, and what it ran on, must be written down and the same on every host. The
levels are the x86-64 psABI's microarchitecture levels (x86-64-v1 … v4), the names compilers
and distributions use (`-march=x86-64-v3`); each is spelled here in the names Linux gives the
flags in /proc/cpuinfo, which is what a guest (and a participant's machine) reports.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Each level's own flags, added to those of the levels below it (the psABI's table; LZCNT shows as
# "abm" and OSXSAVE as "xsave" in /proc/cpuinfo, SCE as "syscall", LAHF-SAHF as "lahf_lm").
_LEVEL_STEPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("x86-64-v1", ("lm", "cmov", "cx8", "fpu", "fxsr", "mmx", "syscall", "sse", "sse2")),
    ("x86-64-v2", ("cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3")),
    ("x86-64-v3", ("avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave")),
    ("x86-64-v4", ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl")),
)
LEVELS: tuple[str, ...] = tuple(name for name, _ in _LEVEL_STEPS)


def _cumulative() -> dict[str, frozenset[str]]:
    flags: set[str] = set()
    out = {}
    for name, step in _LEVEL_STEPS:
        flags |= set(step)
        out[name] = frozenset(flags)
    return out


LEVEL_FLAGS: dict[str, frozenset[str]] = _cumulative()  # every flag a level needs, its lower levels' included

# The few flags libvirt's CPU map spells otherwise than Linux's /proc/cpuinfo.
_LIBVIRT_NAMES = {"sse4_1": "sse4.1", "sse4_2": "sse4.2"}
_LINUX_NAMES = {v: k for k, v in _LIBVIRT_NAMES.items()}

HOST_PASSTHROUGH = "host-passthrough"
MAX = "max"
# A libvirt CPU model's name (libvirt's cpu_map: "Haswell-noTSX", "EPYC-Rome", "qemu64"); whether this
# libvirt knows it and the host can give it is asked of libvirt before the host takes work.
_MODEL_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
CPU_ALLOWED = ('"host-passthrough" (KVM only), "max", a level ("x86-64-v1" to "x86-64-v4") or a libvirt CPU model '
               'name such as "Haswell-noTSX" or "qemu64" (`virsh cpu-models x86_64` lists them)')
LEVEL_ALLOWED = " or ".join(f'"{name}"' for name in LEVELS)


def libvirt_name(flag: str) -> str:
    return _LIBVIRT_NAMES.get(flag, flag)


def linux_name(feature: str) -> str:
    return _LINUX_NAMES.get(feature, feature)


def level_of(flags: frozenset[str] | set[str]) -> str | None:
    """The highest level all of whose flags are in `flags` (Linux's names), or None when not even
    x86-64-v1's are (a flag list that is empty or unreadable)."""
    best = None
    for name in LEVELS:
        if LEVEL_FLAGS[name] <= flags:
            best = name
        else:
            break
    return best


def missing(level: str, flags: frozenset[str] | set[str]) -> list[str]:
    """The flags of `level` that `flags` lack, in the psABI's order."""
    order = [f for _, step in _LEVEL_STEPS for f in step]
    return [f for f in order if f in LEVEL_FLAGS[level] and f not in flags]


def rank(level: str | None) -> int:
    """0 for no level, 1 for x86-64-v1 … 4 for x86-64-v4: levels compare by it."""
    return 0 if level is None else LEVELS.index(level) + 1


def is_cpu_setting(value: str) -> bool:
    return value in (HOST_PASSTHROUGH, MAX) or value in LEVELS or _MODEL_RE.fullmatch(value) is not None


@dataclass(frozen=True)
class GuestCpu:
    """site.toml's [vm] cpu, resolved for the site's accelerator: `setting` as written (or its
    default), and which kind of thing it names."""

    setting: str

    @property
    def kind(self) -> str:
        """"passthrough", "max", "level" or "model"."""
        if self.setting == HOST_PASSTHROUGH:
            return "passthrough"
        if self.setting == MAX:
            return "max"
        return "level" if self.setting in LEVELS else "model"


def default_cpu(accel: str) -> str:
    """KVM gives guests the host's own CPU (as before); TCG gives everything this qemu emulates,
    where qemu's own default (qemu64) is the 2003 baseline: no SSSE3, SSE4, POPCNT, AVX or FMA."""
    return HOST_PASSTHROUGH if accel == "kvm" else MAX
