"""The domain's <cpu> element for site.toml's [vm] cpu (config/cpu.py), kept apart from
domain_xml.py so that what a guest's CPU is can be read, and tested, on its own.

- "host-passthrough": the host's CPU as it is (KVM only): fastest, and a fleet of mixed hosts
  gives entries mixed instruction sets.
- "max": everything the accelerator can give, qemu's `-cpu max`. Under TCG that is every
  instruction this qemu emulates but ERMS and FSRM (TCG_SLOW); qemu's own default, qemu64, is
  the 2003 baseline.
- a level, "x86-64-v3": libvirt's plainest x86-64 model with the level's flags required and
  nothing more, so every host of a fleet gives the same instruction set whatever its CPU.
  kvm64 rather than qemu64: libvirt's qemu64 asks for AMD's svm, which no Intel host has.
- a libvirt model name ("Haswell-noTSX"): that model, no fallback to another.

A required feature or model the host lacks makes libvirt refuse to start the domain; the
host checks first, through libvirt's CPU comparison (cpu_offer.py), and refuses the site in
one sentence before any VM starts.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from ..config.cpu import HOST_PASSTHROUGH, LEVEL_FLAGS, LEVELS, MAX, default_cpu, libvirt_name

LEVEL_BASE_MODEL = "kvm64"
# "Fast" `rep movsb`/`rep stosb`, which make the guest's kernel (copy_user, clear_page) and glibc
# copy a byte per iteration: TCG (Debian 12's qemu 7.2) runs each iteration through its loop, so with
# them a TCG guest moved its data channel's 16 MiB at 33 MB/s instead of 53, and an entry's pipe
# took twice as long (bench/boot.py, docs/development.md). They name no instruction a program could
# need; KVM's hardware runs them fast and keeps them.
TCG_SLOW = ("erms", "fsrm")


def cpu_element(setting: str, accel: str) -> ET.Element:
    """The <cpu> element for `setting` under `accel`."""
    if setting == HOST_PASSTHROUGH:
        if accel != "kvm":
            raise ValueError("host-passthrough needs kvm: TCG has no host CPU to pass through")
        return ET.Element("cpu", mode="host-passthrough")
    if setting == MAX:
        el = ET.Element("cpu", mode="maximum")
        for name in TCG_SLOW if accel == "tcg" else ():
            ET.SubElement(el, "feature", policy="disable", name=name)
        return el
    el = ET.Element("cpu", mode="custom", match="exact")
    model = ET.SubElement(el, "model", fallback="forbid")
    if setting in LEVELS:
        model.text = LEVEL_BASE_MODEL
        for flag in sorted(LEVEL_FLAGS[setting]):
            ET.SubElement(el, "feature", policy="require", name=libvirt_name(flag))
    else:
        model.text = setting
    return el


def cpu_xml(setting: str, accel: str) -> str:
    """The element alone, as libvirt's CPU comparison takes it."""
    return ET.tostring(cpu_element(setting, accel), encoding="unicode")


def add_cpu(dom: ET.Element, setting: str | None, accel: str) -> None:
    """The domain's <cpu>; `setting` None is the accelerator's default (config/cpu.py)."""
    dom.append(cpu_element(setting or default_cpu(accel), accel))
