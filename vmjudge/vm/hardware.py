"""What a stage ran on, for its manifest: the host, its CPU, cores, kernel, qemu and libvirt,
and the VM's own size and accelerator.

Participants of judges with unequal machines learn to resubmit until they land on the fast
one; an organiser needs to see that two entries ran on like hardware before comparing their
times. Read from the host at each run (a host may be upgraded between two stages).

The VMs' host is this machine unless site.toml's [libvirt] uri names libvirt on another
(libvirt_uri.py). Then the facts are that machine's as its libvirt tells them: its name
(getHostname, as "vm_host"), its CPU (the SMBIOS processor name from getSysinfo, else the
vendor and model in getCapabilities), its online CPUs (getInfo); libvirt gives no kernel
release, so the kernel is "unknown" rather than this machine's.

The guest's own CPU (`guest_cpu`: site.toml's [vm] cpu, and the model, flags and x86-64 level
the guest's kernel reported in the agent's hello) is added once the agent has said hello: that
is what the entry could use, whatever the host's CPU is.
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import libvirt

from ..config import Site
from ..config.cpu import level_of, missing, rank
from .libvirt_uri import is_local

UNKNOWN = "unknown"
# What the host keeps of a guest's report: a flag is a kernel name ("avx2", "sse4_1"), a model a line.
_FLAG_RE = re.compile(r"[a-z0-9_]{1,40}")
MAX_FLAGS = 400
MODEL_CHARS = 120


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    try:
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return UNKNOWN


def _version(number: int) -> str:
    """libvirt's version numbers: major * 1,000,000 + minor * 1,000 + release."""
    return f"{number // 1_000_000}.{number // 1000 % 1000}.{number % 1000}"


def _asked(ask: Any) -> str:
    """A version libvirt reports; a figure of the manifest, never a reason to fail the stage."""
    try:
        return _version(ask())
    except libvirt.libvirtError:
        return UNKNOWN


def _xml(ask: Any) -> ET.Element | None:
    """A document libvirt reports (capabilities, sysinfo); None when it cannot or will not give
    it (a host without SMBIOS data, a connection gone)."""
    try:
        return ET.fromstring(ask())
    except (libvirt.libvirtError, ET.ParseError):
        return None


def libvirt_cpu(sysinfo: ET.Element | None, capabilities: ET.Element | None) -> str:
    """The VM host's CPU as its libvirt names it: SMBIOS's processor version is the name
    /proc/cpuinfo gives ("Intel(R) Xeon(R) Gold 6230 …"); libvirt's own model ("Skylake-Server",
    "kvm64") is the nearest it knows, a coarser name, used when SMBIOS says nothing."""
    if sysinfo is not None:
        for entry in sysinfo.iterfind("processor/entry[@name='version']"):
            name = (entry.text or "").strip()
            if name and name.lower() not in ("not specified", "unknown"):
                return name
    if capabilities is not None:
        named = [capabilities.findtext(f"host/cpu/{part}", "").strip() for part in ("vendor", "model")]
        if any(named):
            return " ".join(n for n in named if n)
    return UNKNOWN


def _remote_host(conn: libvirt.virConnect) -> dict[str, Any]:
    """The facts of a VM host that is not this machine, each "unknown" (None for the cores) when
    libvirt will not give it."""
    try:
        cores: int | None = conn.getInfo()[2]
    except libvirt.libvirtError:
        cores = None
    try:
        name = conn.getHostname()
    except libvirt.libvirtError:
        name = UNKNOWN
    return {"vm_host": name, "cpu": libvirt_cpu(_xml(conn.getSysinfo), _xml(conn.getCapabilities)),
            "host_cores": cores, "kernel": UNKNOWN}


def _this_host() -> dict[str, Any]:
    return {"cpu": cpu_model(), "host_cores": os.cpu_count(), "kernel": os.uname().release}


def fingerprint(conn: libvirt.virConnect, site: Site, vcpus: int, memory_mib: int) -> dict[str, Any]:
    """`host` is the queue's name for this daemon's host (the one that ran the stage); with a
    remote libvirt, `vm_host` names the machine its VM ran on."""
    ran_on = _this_host() if is_local(site.uri) else _remote_host(conn)
    return {"host": site.queue.host, **ran_on, "qemu": _asked(conn.getVersion),
            "libvirt": _asked(conn.getLibVersion), "vcpus": vcpus, "memory_mib": memory_mib, "accel": site.accel}


def guest_cpu(setting: str, hello: dict[str, Any] | None) -> dict[str, Any]:
    """The guest's CPU for the manifest: `setting` (site.toml's [vm] cpu) and, from the agent's
    hello (agent 1.8 on), the model and flags its kernel reported and their x86-64 level. What the
    guest sends is bounded and checked here: a hello without a readable report gives the setting
    alone."""
    found: dict[str, Any] = {"setting": setting}
    report = (hello or {}).get("cpu")
    if not isinstance(report, dict):
        return found
    model = report.get("model")
    raw = report.get("flags")
    flags = sorted({f for f in raw[:MAX_FLAGS] if isinstance(f, str) and _FLAG_RE.fullmatch(f)}) \
        if isinstance(raw, list) else []
    found["model"] = model[:MODEL_CHARS] if isinstance(model, str) else None
    found["flags"] = flags
    found["level"] = level_of(frozenset(flags))
    return found


def below_level(guest: dict[str, Any] | None, level: str) -> str | None:
    """Why a guest that reported its CPU (`guest_cpu`'s result) did not reach a challenge's
    [vm] cpu_level, or None: a host whose libvirt described its guests wrongly must not judge the
    challenge's entries, whose failures there would be the CPU's, not theirs. A guest that reported
    nothing (an agent before 1.8) is not held to it."""
    if not guest or "flags" not in guest or rank(guest.get("level")) >= rank(level):
        return None
    lacks = ", ".join(missing(level, frozenset(guest["flags"])))
    return (f"the guest's CPU is {guest.get('level') or 'below x86-64-v1'}, below the challenge's cpu_level {level} "
            f"(it lacks {lacks}), although libvirt said cpu = \"{guest.get('setting')}\" would reach it")


def cpu_phrase(guest: dict[str, Any] | None) -> str:
    """"guest CPU x86-64-v3 (QEMU TCG CPU version 2.5+, cpu = "max")", or "" before #41."""
    if not guest:
        return ""
    level = guest.get("level") or ("not reported" if "flags" not in guest else "below x86-64-v1")
    model = f"{guest['model']}, " if guest.get("model") else ""
    return f"; guest CPU {level} ({model}cpu = \"{guest.get('setting')}\")"


def line(hardware: dict[str, Any]) -> str:
    """One line for `show`: where the stage ran."""
    gpu = f", GPU {hardware['gpu']}" if hardware.get("gpu") else ""
    vm_host = f" (its VMs on {hardware['vm_host']})" if hardware.get("vm_host") else ""
    cores = hardware["host_cores"] or UNKNOWN
    return (f"judged on {hardware['host']}{vm_host}: {hardware['cpu']} ({cores} cores), qemu "
            f"{hardware['qemu']}, libvirt {hardware['libvirt']}, kernel {hardware['kernel']}; VM of "
            f"{hardware['vcpus']} vCPU and {hardware['memory_mib']} MiB under {hardware['accel']}{gpu}"
            f"{cpu_phrase(hardware.get('guest_cpu'))}")
