"""The domain XML, built from a dataclass with ElementTree so that a path or a name inside it
is escaped by the library: no network, no USB, no graphics, direct kernel boot.

Kept apart from the lifecycle (domain.py) so that what a VM is made of can be read, and
tested, without libvirt.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

CHANNEL_NAME = "org.vmjudge.data"


@dataclass(frozen=True)
class DomainSpec:
    name: str
    kernel: Path
    initrd: Path
    root: Path
    home: Path
    cdrom: Path
    console_log: Path
    accel: str = "kvm"
    vcpus: int = 2
    memory_mib: int = 2048
    channel: str = "virtio"
    cmdline_extra: tuple[str, ...] = field(default_factory=tuple)

    @property
    def cmdline(self) -> str:
        return " ".join(("console=ttyS0", "quiet", "loglevel=3", "panic=1", "oops=panic",
                         f"vmjudge.channel={self.channel}") + self.cmdline_extra)


def _sub(parent: ET.Element, tag: str, text: str | None = None, **attrs: str) -> ET.Element:
    el = ET.SubElement(parent, tag, attrs)
    if text is not None:
        el.text = text
    return el


def _disk(devices: ET.Element, path: Path, fmt: str, target: str, bus: str, device: str = "disk",
          readonly: bool = False, relabel: bool = True) -> None:
    disk = _sub(devices, "disk", type="file", device=device)
    # A failed read or write on the host (disk full, I/O error) pauses the VM instead of
    # reaching the guest, where the entry would see an error it did not cause.
    _sub(disk, "driver", name="qemu", type=fmt, error_policy="stop", rerror_policy="stop")
    source = _sub(disk, "source", file=str(path))
    if not relabel:
        # Shared by every VM at once: libvirt must not chown it back and forth.
        _sub(source, "seclabel", model="dac", relabel="no")
    _sub(disk, "target", dev=target, bus=bus)
    if readonly:
        _sub(disk, "readonly")


def domain_xml(spec: DomainSpec) -> str:
    if spec.accel not in ("kvm", "tcg"):
        raise ValueError(f"accel must be kvm or tcg, not {spec.accel!r}")
    dom = ET.Element("domain", type="kvm" if spec.accel == "kvm" else "qemu")
    _sub(dom, "name", spec.name)
    _sub(dom, "memory", str(spec.memory_mib), unit="MiB")
    _sub(dom, "vcpu", str(spec.vcpus))
    os_el = _sub(dom, "os")
    _sub(os_el, "type", "hvm", arch="x86_64", machine="pc")
    _sub(os_el, "kernel", str(spec.kernel))
    _sub(os_el, "initrd", str(spec.initrd))
    _sub(os_el, "cmdline", spec.cmdline)
    features = _sub(dom, "features")
    _sub(features, "acpi")
    if spec.accel == "kvm":
        _sub(dom, "cpu", mode="host-passthrough")
    _sub(dom, "clock", offset="utc")
    for event in ("on_poweroff", "on_reboot", "on_crash"):
        _sub(dom, event, "destroy")
    devices = _sub(dom, "devices")
    _disk(devices, spec.root, "raw", "vda", "virtio", readonly=True, relabel=False)
    _disk(devices, spec.home, "qcow2", "vdb", "virtio")
    _disk(devices, spec.cdrom, "raw", "hdc", "ide", device="cdrom", readonly=True)
    _sub(devices, "controller", type="usb", model="none")
    console = _sub(devices, "serial", type="file")
    _sub(console, "source", path=str(spec.console_log))
    _sub(console, "target", port="0")
    if spec.channel == "virtio":
        channel = _sub(devices, "channel", type="pty")
        _sub(channel, "target", type="virtio", name=CHANNEL_NAME)
    else:
        uart = _sub(devices, "serial", type="pty")
        _sub(uart, "target", port="1")
    rng = _sub(devices, "rng", model="virtio")
    _sub(rng, "backend", "/dev/urandom", model="random")
    _sub(devices, "memballoon", model="none")
    return ET.tostring(dom, encoding="unicode")
