"""Is a GPU ready to be lent to a VM? Read from sysfs before it is, and say what to fix.

When VFIO is not set up, qemu fails with a VM that would not start and a kernel message
("group 14 is not viable", "No such file or directory" for /dev/vfio/14) that only someone who
knows VFIO can act on. The host's kernel already shows everything that decides it: the IOMMU
groups, the card's ids and class, its driver, its group's other members and how it can be
reset. So each check reads one of those and, when it is wrong, gives one sentence naming the
fix. Only files under the configured roots are read, so tests point them at a fake tree.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..config import GpuSite
from ..errors import GpuFault

VFIO_DRIVER = "vfio-pci"
# The class code's top two bytes (base class, subclass), as lspci names them.
CLASS_NAMES = {0x0300: "VGA controller", 0x0302: "3D controller", 0x0604: "PCI bridge"}
DISPLAY_CLASSES = (0x0300, 0x0302)
BRIDGE_CLASS = 0x0604


@dataclass(frozen=True)
class PciFunction:
    """What sysfs says of one PCI function; None where it says nothing (no file, no link)."""

    address: str
    vendor: str | None = None  # "10de", as `lspci -n` writes it
    device: str | None = None
    pci_class: int | None = None  # 0x030200
    driver: str | None = None
    group: str | None = None  # the IOMMU group's number
    reset_methods: tuple[str, ...] | None = None  # None: the kernel made no reset_method file

    @property
    def ids(self) -> str:
        return f"{self.vendor or '?'}:{self.device or '?'}"

    @property
    def class_code(self) -> str:
        return "unknown" if self.pci_class is None else f"0x{self.pci_class:06x}"

    @property
    def kind(self) -> str:
        known = None if self.pci_class is None else CLASS_NAMES.get(self.pci_class >> 8)
        return known or f"class {self.class_code}"

    @property
    def is_bridge(self) -> bool:
        return self.pci_class is not None and self.pci_class >> 8 == BRIDGE_CLASS


@dataclass(frozen=True)
class GpuReading:
    """One configured GPU and the host around it, as sysfs showed them at one moment."""

    address: str
    vfio: bool  # /dev/vfio/vfio exists
    iommu: bool  # the kernel made IOMMU groups
    card: PciFunction | None  # None: no such PCI device
    group_others: tuple[PciFunction, ...] = ()  # the other members of its IOMMU group


def check_gpu(gpu: GpuSite, address: str) -> list[str]:
    """What stops this GPU from being passed to a VM, one sentence each; empty when nothing does."""
    return problems(gpu, read_gpu(gpu, address))


def lendable_card(gpu: GpuSite, address: str) -> PciFunction:
    """The card, if it can be lent to a VM now; else GpuFault ("gpu-preflight") with the first
    thing wrong: what the daemon checks before a GPU slot takes a stage and again just before
    its VM starts (a card can fall off the bus or be rebound in between)."""
    reading = read_gpu(gpu, address)
    found = problems(gpu, reading)
    if found or reading.card is None:  # problems() names a missing card: the second test is mypy's
        raise GpuFault("gpu-preflight", f"the GPU {address} failed its preflight: {found[0]}", address)
    return reading.card


def read_gpu(gpu: GpuSite, address: str) -> GpuReading:
    devices = gpu.sysfs / "bus" / "pci" / "devices"
    groups = gpu.sysfs / "kernel" / "iommu_groups"
    card = read_function(devices / address, address) if (devices / address).is_dir() else None
    others: tuple[PciFunction, ...] = ()
    if card is not None and card.group is not None:
        members = groups / card.group / "devices"
        others = tuple(read_function(members / name, name) for name in _names(members) if name != address)
    return GpuReading(address=address, vfio=(gpu.dev / "vfio" / "vfio").exists(), iommu=bool(_names(groups)),
                      card=card, group_others=others)


def read_function(path: Path, address: str) -> PciFunction:
    """Reads through `path` as the kernel links it (bus/pci/devices/ADDR or an IOMMU group's
    devices/ADDR): the attributes live in the device's own directory either way."""
    reset = _text(path / "reset_method")
    return PciFunction(address=address, vendor=_hex_id(path / "vendor"), device=_hex_id(path / "device"),
                       pci_class=_class(path / "class"), driver=_link_name(path / "driver"),
                       group=_link_name(path / "iommu_group"),
                       reset_methods=None if reset is None else tuple(reset.split()))


def problems(gpu: GpuSite, reading: GpuReading) -> list[str]:
    """Every reason at once, so one reboot can fix them all; the host's own state (VFIO, the
    IOMMU) first, as it explains what follows."""
    found = []
    if not reading.vfio:
        found.append(_no_vfio(gpu))
    if not reading.iommu:
        found.append(_no_iommu(gpu))
    card = reading.card
    if card is None:
        return [*found, _no_device(gpu, reading.address)]
    if card.ids not in gpu.ids:
        found.append(f"{card.address} is {card.ids} ({card.kind}), not an allowed GPU ({', '.join(gpu.ids)}): "
                     "check the address with `lspci -Dnn`, or add its id to [gpu] ids in site.toml.")
    if card.pci_class is None or card.pci_class >> 8 not in DISPLAY_CLASSES:
        found.append(f"{card.address} has class {card.class_code}, which is no display controller's (0x0300xx VGA "
                     "or 0x0302xx 3D): check the address with `lspci -Dnn` and correct [gpu] devices in site.toml.")
    if card.driver != VFIO_DRIVER:
        found.append(_not_on_vfio(gpu, card))
    found.extend(_group_problems(reading))
    if not card.reset_methods:
        found.append(_no_reset(gpu, card))
    return found


def describe(reading: GpuReading) -> str:
    """The doctor's line for a GPU that passed: what will be lent, and how it is made fresh again."""
    card = reading.card
    assert card is not None
    company = ", ".join(f"{o.address} {'bridge' if o.is_bridge else 'on vfio-pci'}" for o in reading.group_others)
    return (f"{card.ids} {card.kind} on {card.driver}, IOMMU group {card.group} ({company or 'alone'}), "
            f"reset by {' or '.join(card.reset_methods or ())}")


def _group_problems(reading: GpuReading) -> list[str]:
    """The kernel lends a group whole: another member a host driver holds could be reached
    through the card's DMA, so VFIO refuses the card ("group N is not viable")."""
    card = reading.card
    assert card is not None
    if card.group is None:
        if not reading.iommu:
            return []  # already said: the IOMMU is off
        return [f"{card.address} is in no IOMMU group, so VFIO cannot take it: check that the firmware's IOMMU "
                "covers this slot (`dmesg | grep -i -e DMAR -e IOMMU`) or move the card to another slot."]
    blocking = [o for o in reading.group_others if o.driver != VFIO_DRIVER and not o.is_bridge]
    if not blocking:
        return []
    who = ", ".join(f"{o.address} ({o.kind}, {f'driver {o.driver}' if o.driver else 'no driver'})"
                    for o in blocking)
    verb, them = ("shares", "it") if len(blocking) == 1 else ("share", "them")
    return [f"IOMMU group {card.group} is not viable: {who} {verb} it with {card.address}; bind {them} to "
            "vfio-pci too or move the card to another slot."]


def _no_vfio(gpu: GpuSite) -> str:
    return (f"{gpu.dev / 'vfio' / 'vfio'} is missing, so qemu cannot reach VFIO: load vfio-pci (`modprobe vfio-pci`, "
            "and add vfio-pci to /etc/modules to keep it loaded after a reboot).")


def _no_iommu(gpu: GpuSite) -> str:
    return (f"the IOMMU is off ({gpu.sysfs / 'kernel' / 'iommu_groups'} is empty or missing), so no device can be "
            "passed to a VM: enable VT-d (Intel) or AMD-Vi (AMD) in the firmware setup and, on Intel, add "
            "`intel_iommu=on` to GRUB_CMDLINE_LINUX in /etc/default/grub (AMD's IOMMU is on by default), run "
            "`update-grub` and reboot.")


def _no_device(gpu: GpuSite, address: str) -> str:
    return (f"there is no PCI device {address} ({gpu.sysfs / 'bus' / 'pci' / 'devices' / address} is missing): "
            "correct [gpu] devices in site.toml; `lspci -D` lists the addresses.")


def _not_on_vfio(gpu: GpuSite, card: PciFunction) -> str:
    """Bound to vfio-pci at boot and for good, so that libvirt (managed='no') never rebinds the
    card between entries and no host driver ever touches what an entry left on it."""
    bound = f"bound to {card.driver}" if card.driver else "bound to no driver"
    return (f"{card.address} is {bound}, not vfio-pci, so it cannot be passed to a VM: put "
            f"`options vfio-pci ids={','.join(gpu.ids)}`, `softdep nouveau pre: vfio-pci` and "
            "`softdep nvidia pre: vfio-pci` in /etc/modprobe.d/vfio.conf, blacklist nouveau (`blacklist nouveau` "
            "in /etc/modprobe.d/blacklist-nouveau.conf), run `update-initramfs -u` and reboot.")


def _no_reset(gpu: GpuSite, card: PciFunction) -> str:
    """A card that cannot be reset would carry one entry's memory and state into the next."""
    path = gpu.sysfs / "bus" / "pci" / "devices" / card.address / "reset_method"
    if card.reset_methods is None:
        return (f"{card.address} has no reset method ({path} is missing), so the card cannot be reset between "
                "entries: a T4 has no function-level reset and needs a bus reset, which needs it alone on its "
                "bus, so put it in a slot of its own (on a kernel of 5.15 or later, as Debian 12's).")
    return (f"{card.address} has every reset method switched off ({path} is empty), so the card cannot be reset "
            f"between entries: run `echo default > {path}` and remove whatever empties it at boot.")


def _names(directory: Path) -> list[str]:
    try:
        return sorted(p.name for p in directory.iterdir())
    except OSError:
        return []


def _text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _hex_id(path: Path) -> str | None:
    """sysfs writes "0x10de"; lspci and vfio-pci's ids= option write "10de"."""
    text = _text(path)
    return text.lower().removeprefix("0x") if text else None


def _class(path: Path) -> int | None:
    text = _text(path)
    try:
        return int(text, 16) if text else None
    except ValueError:
        return None


def _link_name(path: Path) -> str | None:
    """The driver and the IOMMU group are symlinks whose last part is the name."""
    try:
        return path.readlink().name
    except OSError:
        return None
