"""What this host's guests will get as their CPU, asked of libvirt without starting a VM, and
whether the host can give it at all.

A named model or level that the host cannot provide would make every VM fail to start, each
stage retried and parked as the infrastructure's: so the daemon asks libvirt's CPU comparison
(compareHypervisorCPU, for the accelerator's hypervisor) before it takes any work, and refuses
the site in one sentence naming what is missing. What guests get is read the same way: the
hypervisor's own CPU (domain capabilities' host-model, what host-passthrough and "max" give)
or the model's, expanded to its feature list (baselineHypervisorCPU); its x86-64 level then
decides which challenges' stages this host may take (challenge.toml's [vm] cpu_level).

libvirt that cannot answer (the test driver, an old libvirt) leaves the flags unknown: a
passthrough or "max" site still runs, a named model cannot be checked and is refused.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass

import libvirt

from ..config import Site
from ..config.cpu import LEVEL_FLAGS, LEVELS, level_of, linux_name, missing
from .guest_cpu import cpu_xml

ARCH = "x86_64"
MACHINE = "pc"
# The flags an organiser asks about first: what wheels built for today's CPUs need.
HEADLINE = ("avx", "avx2", "fma")


@dataclass(frozen=True)
class CpuOffer:
    """What guests of this site get: `model` as libvirt names it ("EPYC" for TCG's max here,
    "kvm64" for a level), `flags` in Linux's names (empty: libvirt could not say)."""

    setting: str
    accel: str
    model: str | None
    flags: frozenset[str]

    @property
    def known(self) -> bool:
        return bool(self.flags)

    @property
    def level(self) -> str | None:
        return level_of(self.flags)

    def meets(self, level: str) -> bool:
        return self.known and LEVEL_FLAGS[level] <= self.flags

    def describe(self) -> str:
        """One line for doctor: `cpu = "max" under tcg: x86-64-v3 (libvirt's nearest model EPYC; AVX, AVX2, FMA:
        yes, yes, yes)`."""
        head = f'cpu = "{self.setting}" under {self.accel}: '
        if not self.known:
            return head + "libvirt could not say which flags guests get"
        has = ", ".join("yes" if f in self.flags else "no" for f in HEADLINE)
        nearest = "libvirt's nearest model" if self.setting in ("host-passthrough", "max") else "model"
        model = f"{nearest} {self.model}; " if self.model else ""
        return f"{head}{self.level or 'below x86-64-v1'} ({model}{', '.join(f.upper() for f in HEADLINE)}: {has})"


def virttype(accel: str) -> str:
    return "kvm" if accel == "kvm" else "qemu"


def _features(cpu: ET.Element) -> tuple[str | None, frozenset[str]]:
    model = cpu.findtext("model")
    flags = frozenset(linux_name(f.get("name", "")) for f in cpu.iter("feature")
                      if f.get("policy", "require") in ("require", "force"))
    return model, flags


def _expanded(conn: libvirt.virConnect, site: Site, xml: str) -> tuple[str | None, frozenset[str]]:
    out = conn.baselineHypervisorCPU(None, ARCH, MACHINE, virttype(site.accel), [xml],
                                     libvirt.VIR_CONNECT_BASELINE_CPU_EXPAND_FEATURES)
    return _features(ET.fromstring(out))


def _hypervisor_cpu(conn: libvirt.virConnect, site: Site) -> str | None:
    """The hypervisor's own CPU as a custom CPU (domain capabilities' host-model), or None."""
    caps = ET.fromstring(conn.getDomainCapabilities(None, ARCH, MACHINE, virttype(site.accel), 0))
    mode = caps.find("cpu/mode[@name='host-model']")
    if mode is None or mode.get("supported") != "yes":
        return None
    cpu = ET.Element("cpu", mode="custom", match="exact")
    cpu.extend(list(mode))
    return ET.tostring(cpu, encoding="unicode")


def refusal(site: Site, conn: libvirt.virConnect) -> str | None:
    """Why this host cannot give guests site.toml's [vm] cpu, in one sentence, or None when it
    can (or when the setting is the host's own CPU, which it always can)."""
    kind = site.guest_cpu.kind
    if kind in ("passthrough", "max"):
        return None
    setting = site.guest_cpu.setting
    where = f'[vm] cpu = "{setting}"'
    try:
        if kind == "model" and setting not in conn.getCPUModelNames(ARCH):
            return (f"{where} is not a CPU model libvirt at {site.uri} knows: choose one of `virsh cpu-models "
                    "x86_64`, or a level such as \"x86-64-v3\".")
        result = conn.compareHypervisorCPU(None, ARCH, MACHINE, virttype(site.accel), cpu_xml(setting, site.accel), 0)
    except libvirt.libvirtError as exc:
        return (f"{where} cannot be checked: libvirt at {site.uri} will not compare CPUs ({exc.get_error_message()}); "
                "use \"max\" or \"host-passthrough\" there.")
    if result in (libvirt.VIR_CPU_COMPARE_IDENTICAL, libvirt.VIR_CPU_COMPARE_SUPERSET):
        return None
    lacks = _lacking(conn, site, setting)
    what = f" (it lacks {', '.join(lacks)})" if lacks else ""
    return (f"{where} is more than this host can give its guests under {site.accel}{what}: choose a lower level "
            "or an older model, or take this host out of the fleet.")


def _lacking(conn: libvirt.virConnect, site: Site, setting: str) -> list[str]:
    """The flags of a level the hypervisor lacks (empty for a model, or when libvirt cannot say)."""
    if setting not in LEVELS:
        return []
    try:
        xml = _hypervisor_cpu(conn, site)
        has = _expanded(conn, site, xml)[1] if xml else frozenset()
    except (libvirt.libvirtError, ET.ParseError):
        return []
    return missing(setting, has) if has else []


def offer(conn: libvirt.virConnect, site: Site) -> CpuOffer:
    """What guests get under this site's [vm] cpu; check `refusal` first (a setting the host cannot
    give would be described as what the hypervisor would make of it)."""
    setting, accel = site.guest_cpu.setting, site.accel
    try:
        if site.guest_cpu.kind in ("passthrough", "max"):
            xml = _hypervisor_cpu(conn, site)
            if xml is None:
                return CpuOffer(setting, accel, None, frozenset())
        else:
            xml = cpu_xml(setting, accel)
        model, flags = _expanded(conn, site, xml)
    except (libvirt.libvirtError, ET.ParseError):
        return CpuOffer(setting, accel, None, frozenset())
    return CpuOffer(setting, accel, model, flags)

