"""What an entry runs on, written by the judge (#58): the guest system from the image it built (its
manifest: the Debian point release, the kernel, Python, the challenge's packages with the versions
installed), the VM the challenge asks for, the CPU the host's guests get, and what an entry may not do.
The same text is the challenge page's and `vmjudge challenge show`'s, so that participants read what the
judge will run, not what an organiser remembers of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..config import Challenge, Site

# What the agent keeps for the kernel and itself (images/guest/hardening.py ENTRY_MEMORY_RESERVE): at least this,
# or a tenth of the VM's memory.
RESERVE_MIB = 128


def upstream(version: str | None) -> str | None:
    """A Debian package version's upstream part: "3.11.2" of "3.11.2-1+b1" (and of "1:3.11.2-1")."""
    if not version:
        return None
    return version.split(":", 1)[-1].rsplit("-", 1)[0]


@dataclass(frozen=True)
class Runtime:
    """The runtime's facts, each as participants read it."""

    debian: str  # "12.12 (bookworm)"
    kernel: str
    python: str | None
    packages: dict[str, str]  # the challenge's own packages ([image] packages), with the versions installed
    pip: tuple[str, ...]  # "name==version" as pip lists them
    vcpus: int
    memory_mib: int
    entry_memory_mib: int  # what the entry's commands may use together, about
    home_mib: int
    cpu: str
    gpu: str | None
    limits: tuple[tuple[str, float], ...]
    offline: str = "the entry runs"  # what runs offline, as its kind names it

    def lines(self) -> list[str]:
        packages = ", ".join(f"{name} {version}" for name, version in self.packages.items()) or "none beyond the base"
        return [
            f"System: Debian {self.debian}, Linux {self.kernel}" + (f", Python {self.python}" if self.python else ""),
            f"Packages: {packages}" + (f"; from pip: {', '.join(self.pip)}" if self.pip else ""),
            f"VM: {self.vcpus} vCPU{'s' if self.vcpus > 1 else ''}, {self.memory_mib} MiB of memory (the entry's "
            f"commands may use about {self.entry_memory_mib} MiB together), a {self.home_mib} MiB home disk",
            f"CPU: {self.cpu}",
            f"GPU: {self.gpu or 'none'}",
            f"Network: none. The VM has no network interface: {self.offline} offline, with only what the image and "
            "the entry hold.",
            "Time limits: " + "; ".join(f"{what} {seconds:g} s" for what, seconds in self.limits),
        ]

    def document(self) -> dict[str, Any]:
        return {"debian": self.debian, "kernel": self.kernel, "python": self.python, "packages": self.packages,
                "pip": list(self.pip), "vcpus": self.vcpus, "memory_mib": self.memory_mib,
                "entry_memory_mib": self.entry_memory_mib, "home_mib": self.home_mib, "cpu": self.cpu,
                "gpu": self.gpu, "limits": dict(self.limits)}


def describe_runtime(ch: Challenge, manifest: dict[str, Any], site: Site) -> Runtime:
    installed: dict[str, str] = manifest.get("packages") or {}
    suite = manifest.get("suite") or site.suite
    release = manifest.get("debian_version")
    memory = ch.vm.memory_mib
    return Runtime(
        debian=f"{release} ({suite})" if release else suite,
        kernel=str(manifest.get("kernel_version", "unknown")),
        python=upstream(installed.get("python3")),
        packages={name: installed.get(name, "?") for name in sorted(ch.image.packages)},
        pip=tuple(manifest.get("pip_packages") or ()),
        vcpus=ch.vm.vcpus, memory_mib=memory, entry_memory_mib=memory - max(RESERVE_MIB, memory // 10),
        home_mib=ch.vm.home_mib, cpu=_cpu(ch, site), gpu=_gpu(ch),
        limits=_limits(ch), offline="setup.sh and next.sh run" if ch.entry.kind == "archive" else "the entry runs")


def _cpu(ch: Challenge, site: Site) -> str:
    cpu = site.guest_cpu
    said = {"passthrough": "the host's own CPU, passed through",
            "max": "every feature this host's qemu emulates (no hardware acceleration)",
            "level": f"the x86-64 level {cpu.setting}'s features", "model": f"qemu's CPU model {cpu.setting}"}[cpu.kind]
    return said + (f"; at least {ch.vm.cpu_level}" if ch.vm.cpu_level else "")


def _gpu(ch: Challenge) -> str | None:
    if ch.vm.gpu is None:
        return None
    return ("an NVIDIA T4" if ch.vm.gpu == "t4" else "an NVIDIA GPU") + f", passed through, driver {ch.image.gpu}"


def _limits(ch: Challenge) -> tuple[tuple[str, float], ...]:
    lim = ch.limits
    first = ("installing the submission", lim.setup) if ch.entry.kind == "submission" else ("setup.sh", lim.setup)
    step = "each step" if ch.submission is not None and ch.submission.steps else \
        None if ch.entry.kind == "submission" else "each record"
    return tuple(x for x in (first, (step, lim.per_record) if step else None, ("the quiz", lim.quiz_total),
                             ("the exam", lim.exam_total)) if x is not None)
