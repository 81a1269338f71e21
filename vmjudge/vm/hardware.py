"""What a stage ran on, for its manifest: the host, its CPU, cores, kernel, qemu and libvirt,
and the VM's own size and accelerator.

Participants of judges with unequal machines learn to resubmit until they land on the fast
one; an organiser needs to see that two entries ran on like hardware before comparing their
times. Read from the host at each run (a host may be upgraded between two stages).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import libvirt

from ..config import Site


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    try:
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def _version(number: int) -> str:
    """libvirt's version numbers: major * 1,000,000 + minor * 1,000 + release."""
    return f"{number // 1_000_000}.{number // 1000 % 1000}.{number % 1000}"


def _asked(ask: Any) -> str:
    """A version libvirt reports; a figure of the manifest, never a reason to fail the stage."""
    try:
        return _version(ask())
    except libvirt.libvirtError:
        return "unknown"


def fingerprint(conn: libvirt.virConnect, site: Site, vcpus: int, memory_mib: int) -> dict[str, Any]:
    return {"host": site.queue.host, "cpu": cpu_model(), "host_cores": os.cpu_count(),
            "kernel": os.uname().release, "qemu": _asked(conn.getVersion),
            "libvirt": _asked(conn.getLibVersion), "vcpus": vcpus, "memory_mib": memory_mib,
            "accel": site.accel}


def line(hardware: dict[str, Any]) -> str:
    """One line for `show`: where the stage ran."""
    gpu = f", GPU {hardware['gpu']}" if hardware.get("gpu") else ""
    return (f"judged on {hardware['host']}: {hardware['cpu']} ({hardware['host_cores']} cores), qemu "
            f"{hardware['qemu']}, libvirt {hardware['libvirt']}, kernel {hardware['kernel']}; VM of "
            f"{hardware['vcpus']} vCPU and {hardware['memory_mib']} MiB under {hardware['accel']}{gpu}")
