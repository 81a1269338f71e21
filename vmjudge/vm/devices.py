"""The allow-list of a judge VM's devices, at the two levels where they can be read.

Every device is a way in or out of the guest, and the code behind each is what an entry can
attack from inside: a VM has only what the judge needs (disks, the CD, the serial console, the
data channel, a random source, and a GPU slot's card), never a NIC, USB, graphics or sound.
domain_xml.py writes the domain XML; libvirt turns it into qemu's command line. Both are checked
here: the XML's <devices> (what the judge asks, and what libvirt gives back for the machine), and
the `-device` drivers of qemu's command line (what the process really has: `vmjudge doctor` and
the tests read it from /proc). The machine's own board devices (the PC's IDE, i8042, RTC) are not
on the command line: `-nodefaults` leaves only those, and it must be there.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence

# The domain XML's <devices> children, each as "element/kind" (xml_kinds): what domain_xml.py writes.
XML_DEVICES = frozenset({
    "disk/disk/virtio",  # the image's root, the home disk, a container entry's root
    "disk/cdrom/ide",  # the job's CD on the pc machine
    "disk/cdrom/sata",  # the job's CD on a GPU VM's q35
    "controller/usb/none",
    "serial/file",  # the console, to its log
    "serial/pty",  # the data channel as a second UART (site.toml channel = "uart")
    "channel/pty/virtio",  # the data channel (virtio-serial)
    "rng/virtio",
    "memballoon/none",
    "controller/pci/pcie-root",  # a GPU VM's q35 root bus
    "controller/pci/pcie-root-port",  # the GPU's own port, and those libvirt adds for virtio on q35
    "hostdev/pci/vfio",  # a GPU slot's card
})
# What libvirt adds to it when it gives the XML back (a live domain's, a saved state's): parts of
# the machine the judge's XML names already, or which the board has whatever the XML says.
XML_IMPLICIT = frozenset({
    "emulator",
    "controller/pci/pci-root",
    "controller/ide",  # the PIIX's own IDE, where the CD sits
    "controller/sata",  # q35's own AHCI
    "controller/virtio-serial",  # the data channel's bus
    "console/file",  # serial port 0 again, as libvirt lists consoles
    "input/mouse/ps2",  # the i8042 of the board: no USB or tablet
    "input/keyboard/ps2",
    "audio/none",  # libvirt's audio backend that plays nothing, for a VM with no sound card
})

# qemu's `-device` drivers, what libvirt makes of the XML above.
QEMU_DEVICES = frozenset({"virtio-blk-pci", "ide-cd", "isa-serial", "virtio-serial-pci", "virtserialport",
                          "virtio-rng-pci"})
QEMU_GPU_DEVICES = QEMU_DEVICES | {"pcie-root-port", "vfio-pci"}
# Options that give a VM a way out, or qemu's defaults back: never on a judge VM's command line.
FORBIDDEN_OPTIONS = ("-netdev", "-nic", "-net", "-vnc", "-spice", "-usb", "-usbdevice", "-drive", "-fsdev",
                     "-virtfs", "-soundhw", "-vga", "-parallel", "-serial", "-monitor", "-readconfig")
REQUIRED_OPTIONS = ("-nodefaults", "-no-user-config")


def xml_kinds(xml: str) -> list[str]:
    """Each device of a domain XML as "element/kind", in order."""
    devices = ET.fromstring(xml).find("devices")
    return [_kind(el) for el in (devices if devices is not None else [])]


def _kind(el: ET.Element) -> str:
    tag = el.tag
    if tag == "disk":
        target = el.find("target")
        return f"disk/{el.get('device')}/{target.get('bus') if target is not None else '?'}"
    if tag == "controller":
        return "/".join(p for p in ("controller", el.get("type"), el.get("model")) if p)
    if tag in ("serial", "console"):
        return f"{tag}/{el.get('type')}"
    if tag == "channel":
        target = el.find("target")
        return f"channel/{el.get('type')}/{target.get('type') if target is not None else '?'}"
    if tag in ("rng", "memballoon"):
        return f"{tag}/{el.get('model')}"
    if tag == "hostdev":
        driver = el.find("driver")
        return f"hostdev/{el.get('type')}/{driver.get('name') if driver is not None else '?'}"
    if tag == "input":
        return f"input/{el.get('type')}/{el.get('bus')}"
    if tag == "audio":
        return f"audio/{el.get('type')}"
    return tag  # any other element (an interface, graphics, video, sound…) is named as it is


def unlisted_xml(xml: str, implicit: bool = False) -> list[str]:
    """The devices of `xml` off the allow-list; `implicit` for an XML libvirt gave back."""
    return unlisted_kinds(xml_kinds(xml), implicit)


def unlisted_kinds(kinds: Iterable[str], implicit: bool = False) -> list[str]:
    """The kinds (xml_kinds) off the allow-list, each once; `implicit` for an XML libvirt gave back
    (a running domain's: what was hot-plugged into it is there, and not on qemu's command line)."""
    allowed = XML_DEVICES | (XML_IMPLICIT if implicit else frozenset())
    return _once(k for k in kinds if k not in allowed)


def qemu_devices(argv: Sequence[str]) -> list[str]:
    """The driver of each `-device` of a qemu command line (JSON, as libvirt writes them, or key=value)."""
    found = []
    for flag, value in zip(argv, argv[1:], strict=False):
        if flag == "-device":
            if value.startswith("{"):
                found.append(str(json.loads(value).get("driver")))
            else:
                found.append(value.split(",", 1)[0].removeprefix("driver="))
    return found


def unlisted_qemu(argv: Sequence[str], gpu: bool) -> list[str]:
    """What qemu's command line has that a judge VM must not, or lacks that it must."""
    allowed = QEMU_GPU_DEVICES if gpu else QEMU_DEVICES
    found = [f"-device {d}" for d in _once(qemu_devices(argv)) if d not in allowed]
    found += [opt for opt in FORBIDDEN_OPTIONS if opt in argv]
    found += [f"no {opt}" for opt in REQUIRED_OPTIONS if opt not in argv]
    return found


def _once(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))
