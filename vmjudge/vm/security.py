"""What libvirt says of how it confines qemu, read through its API without starting a VM.

The daemon's production checks (supervisor/confinement.py) run before any VM, on every start,
and must work with libvirt on another machine: so they read libvirt's capabilities (its
security drivers, and the DAC driver's base label: the uid and gid qemu runs as) and the
command line libvirt would give the judge's own domain (domainXMLToNative: whether it has
`-sandbox on`, and which devices). `vmjudge doctor` then reads the running qemu itself
(qemu_process.py), which is the proof; this is the quick, predictive read.
"""

from __future__ import annotations

import shlex
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

import libvirt

from ..errors import InfrastructureError


@dataclass(frozen=True)
class SecurityModel:
    model: str  # apparmor, selinux, dac, none
    doi: str
    base_labels: dict[str, str] = field(default_factory=dict)  # domain type (kvm, qemu) → label, e.g. "+64055:+64055"


def security_models(capabilities: str) -> list[SecurityModel]:
    """The host's security drivers, in libvirt's order (the first is the one that labels qemu)."""
    host = ET.fromstring(capabilities).find("host")
    models = []
    for sec in host.findall("secmodel") if host is not None else []:
        labels = {b.get("type", ""): (b.text or "").strip() for b in sec.findall("baselabel")}
        models.append(SecurityModel((sec.findtext("model") or "").strip(), (sec.findtext("doi") or "").strip(),
                                    labels))
    return models


def lsm(models: list[SecurityModel]) -> str:
    """The Linux security module libvirt confines qemu with ("apparmor", "selinux"), or "none"."""
    found = [m.model for m in models if m.model not in ("dac", "none", "")]
    return found[0] if found else "none"


def dac_ids(models: list[SecurityModel], domain_type: str) -> tuple[int, int] | None:
    """The uid and gid qemu is started as for a domain of `domain_type` (kvm or qemu), from the
    DAC driver's base label ("+64055:+64055"); None when libvirt names none."""
    for m in models:
        label = m.base_labels.get(domain_type) if m.model == "dac" else None
        if label:
            uid, _, gid = label.partition(":")
            try:
                return int(uid.lstrip("+")), int(gid.lstrip("+"))
            except ValueError:
                return None
    return None


def planned_argv(conn: libvirt.virConnect, xml: str) -> list[str]:
    """The qemu command line libvirt would start `xml` with (its environment dropped)."""
    try:
        text = conn.domainXMLToNative("qemu-argv", xml, 0)
    except libvirt.libvirtError as exc:
        raise InfrastructureError("libvirt-unreachable", "libvirt would not say how it starts qemu "
                                  f"({exc.get_error_message()}).") from None
    argv = shlex.split(text)
    while argv and "=" in argv[0] and not argv[0].startswith("/"):
        argv.pop(0)
    return argv


def sandboxed(argv: list[str]) -> bool:
    """qemu started with its seccomp filter: `-sandbox on,…` (libvirt's seccomp_sandbox)."""
    return any(flag == "-sandbox" and value.split(",")[0] == "on" for flag, value in zip(argv, argv[1:],
                                                                                           strict=False))
