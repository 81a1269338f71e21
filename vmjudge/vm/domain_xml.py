"""The domain XML, built from a dataclass with ElementTree so that a path or a name inside it
is escaped by the library: no network, no USB, no graphics, direct kernel boot.

A GPU domain is the same VM on q35 with one host GPU passed through with VFIO: a PCIe card
belongs on a PCIe machine, and q35 has no IDE, so its CD-ROM is on SATA. The guest still finds
the CD as /dev/sr0 (sr_mod names ATAPI drives alike on either bus), but through the ahci driver,
which the CPU image's initramfs does not load (it loads ata_piix): the GPU image must. Without
a GPU nothing changes, to the byte, so that every CPU VM is exactly what it was.

Kept apart from the lifecycle (domain.py) so that what a VM is made of can be read, and
tested, without libvirt.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from ..config.site import PCI_ADDRESS_RE
from .guest_cpu import add_cpu
from .job import DATA_SERIAL
from .memory import hard_limit_mib
from .pinning import CpuTune

CHANNEL_NAME = "org.vmjudge.data"
HOME_TARGET = "vdb"
CDROM_TARGET = "hdc"  # on the pc machine's IDE; a GPU VM's (q35) is on SATA
# A container entry's root (vm/job.py Job.entry_root): read-only, after the home disk. The guest
# names virtio disks in the order it finds them, which a hot-plug (a warm start) need not keep, so
# the agent finds this one by its serial (guest/root_disk.py), not by its name.
ENTRY_ROOT_TARGET = "vdc"
ENTRY_ROOT_SERIAL = "vmjudge-entry-root"
# A container challenge's [container] tmp: the cases' /tmp, a writable disk of its own (found by its serial too).
TMP_TARGET = "vdd"
TMP_SERIAL = "vmjudge-tmp"
# A stage's record sets (vm/job.py Job.data): read-only, shared by every VM at once, so libvirt must not
# relabel them (images/data_disk.py makes them readable by qemu's group alone); found by serial too.
DATA_TARGETS = ("vde", "vdf", "vdg", "vdh")
# The GPU's root port: bus 0 is q35's pcie-root, so the port is bus 1 and the card sits alone
# on it (a root port has one slot), where libvirt cannot place another device.
_GPU_ROOT_PORT = 1


@dataclass(frozen=True)
class PciAddress:
    domain: int
    bus: int
    slot: int
    function: int

    @classmethod
    def parse(cls, text: str) -> PciAddress:
        match = PCI_ADDRESS_RE.fullmatch(text)  # whole: a trailing newline is no address
        if match is None:
            raise ValueError(f"not a PCI address such as 0000:65:00.0: {text!r}")
        domain, bus, slot, function = (int(part, 16) for part in match.groups())
        return cls(domain, bus, slot, function)

    def attrs(self) -> dict[str, str]:
        """libvirt's spelling: hexadecimal, as lspci shows the address, so the two read alike."""
        return {"domain": f"0x{self.domain:04x}", "bus": f"0x{self.bus:02x}", "slot": f"0x{self.slot:02x}",
                "function": f"0x{self.function:x}"}


# The guest kernel's arguments that the judge's VMs and the replica share. preempt=full: Debian's
# kernel is built for every preemption model and starts in "voluntary", where kernel code runs on
# until it reaches a resched point. An entry filling its memory had the kernel clear its pages with
# none for 2.5-4 s at a time, and a 1-vCPU guest under TCG then ran nothing else: no agent, no
# heartbeat, not even a real-time task (docs/development.md). Fully preemptible, the
# agent's tick comes through whatever the entry makes the kernel do.
GUEST_KERNEL_ARGS = ("quiet", "loglevel=3", "preempt=full")
# The pc machine's judge VMs only (not q35's, nor the replica on a participant's computer): PCI
# interrupts routed by the firmware's PIRQ table, not by ACPI. Enabling each virtio device made the
# kernel evaluate an ACPI interrupt link, 0.11 s each under TCG, 0.44 s of every cold boot
# (docs/development.md); the virtio devices use MSI-X and the IDE CD-ROM its legacy IRQs either way.
PC_KERNEL_ARGS = ("acpi=noirq",)


@dataclass(frozen=True)
class DomainSpec:
    name: str
    kernel: Path
    initrd: Path
    root: Path
    home: Path | None  # None: no home disk (a warm state is saved without one, vm/warm.py)
    cdrom: Path | None  # None: an empty CD-ROM drive, its tray open to a medium given later
    console_log: Path
    accel: str = "kvm"
    vcpus: int = 2
    memory_mib: int = 2048
    channel: str = "virtio"
    cmdline_extra: tuple[str, ...] = field(default_factory=tuple)
    gpu: str | None = None  # the host PCI address of a GPU to pass through, as site.toml's [gpu] devices
    cputune: CpuTune | None = None  # its slot's cores (pinning.py); None leaves the VM unpinned
    entry_root: Path | None = None  # a container entry's root file system (squashfs), a read-only disk
    tmp_disk: Path | None = None  # [container] tmp: the cases' /tmp (ext4 in a sparse raw file), writable
    cpu: str | None = None  # site.toml's [vm] cpu (guest_cpu.py); None: the accelerator's default
    data_disks: tuple[Path, ...] = ()  # the job's record sets (Job.data), in its order: read-only disks

    @property
    def cmdline(self) -> str:
        machine = PC_KERNEL_ARGS if self.gpu is None else ()
        return " ".join(("console=ttyS0", *GUEST_KERNEL_ARGS, *machine, "panic=1", "oops=panic",
                         f"vmjudge.channel={self.channel}") + self.cmdline_extra)


def _sub(parent: ET.Element, tag: str, text: str | None = None, **attrs: str) -> ET.Element:
    el = ET.SubElement(parent, tag, attrs)
    if text is not None:
        el.text = text
    return el


def _disk(devices: ET.Element | None, path: Path | None, fmt: str, target: str, bus: str, device: str = "disk",
          readonly: bool = False, relabel: bool = True, serial: str | None = None,
          shareable: bool = False) -> ET.Element:
    disk = ET.Element("disk", type="file", device=device) if devices is None else \
        _sub(devices, "disk", type="file", device=device)
    # A failed read or write on the host (disk full, I/O error) pauses the VM instead of
    # reaching the guest, where the entry would see an error it did not cause.
    _sub(disk, "driver", name="qemu", type=fmt, error_policy="stop", rerror_policy="stop")
    if path is not None:
        source = _sub(disk, "source", file=str(path))
        if not relabel:
            # Shared by every VM at once: libvirt must not chown it back and forth.
            _sub(source, "seclabel", model="dac", relabel="no")
    _sub(disk, "target", dev=target, bus=bus)
    if serial is not None:
        _sub(disk, "serial", serial)
    if readonly:
        _sub(disk, "readonly")
    if shareable:  # attached to many VMs at once: libvirt takes no exclusive lock on it (virtlockd, sanlock)
        _sub(disk, "shareable")
    return disk


def _entry_root(devices: ET.Element | None, path: Path) -> ET.Element:
    """Read-only, and relabelled by libvirt for its qemu user, which a read-only disk keeps after
    the run (libvirt gives back no read-only disk, which other VMs might share): run_job gives it
    back to root."""
    return _disk(devices, path, "raw", ENTRY_ROOT_TARGET, "virtio", readonly=True, serial=ENTRY_ROOT_SERIAL)


def _tmp_disk(devices: ET.Element | None, path: Path) -> ET.Element:
    return _disk(devices, path, "raw", TMP_TARGET, "virtio", serial=TMP_SERIAL)


def _data_disk(devices: ET.Element | None, path: Path, index: int) -> ET.Element:
    return _disk(devices, path, "raw", DATA_TARGETS[index], "virtio", readonly=True, relabel=False,
                 serial=f"{DATA_SERIAL}{index}", shareable=True)


def data_disk_xml(path: Path, index: int) -> str:
    """A record set's disk alone, as a warm-started VM is given it once restored (attachDevice)."""
    return ET.tostring(_data_disk(None, path, index), encoding="unicode")


def tmp_disk_xml(path: Path) -> str:
    """The /tmp disk alone, as a warm-started VM is given it once restored (attachDevice)."""
    return ET.tostring(_tmp_disk(None, path), encoding="unicode")


def home_disk_xml(path: Path) -> str:
    """The home disk alone, as a warm-started VM is given it once restored (attachDevice)."""
    return ET.tostring(_disk(None, path, "qcow2", HOME_TARGET, "virtio"), encoding="unicode")


def entry_root_xml(path: Path) -> str:
    """The entry-root disk alone, as a warm-started VM is given it once restored (attachDevice)."""
    return ET.tostring(_entry_root(None, path), encoding="unicode")


def cdrom_xml(path: Path) -> str:
    """The CD-ROM drive with the job's medium in it, as a warm-started VM is given it (updateDevice)."""
    return ET.tostring(_disk(None, path, "raw", CDROM_TARGET, "ide", device="cdrom", readonly=True),
                       encoding="unicode")


def _gpu(devices: ET.Element, address: PciAddress) -> None:
    _sub(devices, "controller", type="pci", index="0", model="pcie-root")
    _sub(devices, "controller", type="pci", index=str(_GPU_ROOT_PORT), model="pcie-root-port")
    # managed='no': the card stays bound to vfio-pci on the host for good (the preflight checks
    # it), so libvirt never unbinds or rebinds it between entries; vfio-pci resets it when qemu
    # lets it go. No <memoryBacking><locked/>: VFIO pins all guest RAM itself when it maps it for
    # the card's DMA, and libvirt raises qemu's memlock limit whenever a VFIO hostdev is present: to
    # the guest's memory plus 1 GiB (qemuDomainGetMemLockLimitBytes; libvirt's qemumemlocktest
    # "pc-hostdev"); the judge's memory bound (memory.py) is set on the running domain, which
    # leaves that limit as it is. <locked/> would add nothing VFIO needs, and without a
    # <memtune><hard_limit> in this XML it lifts that limit to unlimited ("pc-locked+hostdev").
    hostdev = _sub(devices, "hostdev", mode="subsystem", type="pci", managed="no")
    _sub(hostdev, "driver", name="vfio")
    source = _sub(hostdev, "source")
    _sub(source, "address", **address.attrs())
    _sub(hostdev, "address", type="pci", **PciAddress(0, _GPU_ROOT_PORT, 0, 0).attrs())


def tune_xml(tune: CpuTune, vcpus: int) -> str:
    """The <cputune> element alone, as a warm-started VM is restored with its slot's (vm/warm.py)."""
    holder = ET.Element("domain")
    _cputune(holder, tune, vcpus)
    return ET.tostring(holder[0], encoding="unicode")


def hard_limit_kib(spec: DomainSpec) -> int:
    """qemu's memory bound for this VM (memory.py), which the runner sets on the started domain
    (Domain.bound_memory) rather than in this XML: see memory.py for why."""
    return hard_limit_mib(spec.memory_mib, spec.accel, spec.gpu is not None) * 1024


def _cputune(dom: ET.Element, tune: CpuTune, vcpus: int) -> None:
    """Each vCPU on its slot's cores, and qemu's emulator threads (its main loop, its I/O) on
    the same slot's: left anywhere, they would steal time from another slot's vCPUs."""
    if len(tune.vcpus) != vcpus:
        raise ValueError(f"the pinning names {len(tune.vcpus)} vCPUs for a VM of {vcpus}")
    el = _sub(dom, "cputune")
    for j, cpus in enumerate(tune.vcpus):
        _sub(el, "vcpupin", vcpu=str(j), cpuset=cpus)
    _sub(el, "emulatorpin", cpuset=tune.emulator)


def domain_xml(spec: DomainSpec) -> str:
    if spec.accel not in ("kvm", "tcg"):
        raise ValueError(f"accel must be kvm or tcg, not {spec.accel!r}")
    gpu = PciAddress.parse(spec.gpu) if spec.gpu is not None else None
    if gpu is not None and spec.accel != "kvm":
        # A site that emulates its CPU has no business lending a GPU: say so rather than
        # build a VM that would crawl through every CUDA call.
        raise ValueError("a GPU is passed through only to a kvm domain, not under tcg")
    dom = ET.Element("domain", type="kvm" if spec.accel == "kvm" else "qemu")
    _sub(dom, "name", spec.name)
    _sub(dom, "memory", str(spec.memory_mib), unit="MiB")
    _sub(dom, "vcpu", str(spec.vcpus))
    if spec.cputune is not None:
        _cputune(dom, spec.cputune, spec.vcpus)
    os_el = _sub(dom, "os")
    _sub(os_el, "type", "hvm", arch="x86_64", machine="pc" if gpu is None else "q35")
    _sub(os_el, "kernel", str(spec.kernel))
    _sub(os_el, "initrd", str(spec.initrd))
    _sub(os_el, "cmdline", spec.cmdline)
    features = _sub(dom, "features")
    _sub(features, "acpi")
    add_cpu(dom, spec.cpu, spec.accel)
    _sub(dom, "clock", offset="utc")
    for event in ("on_poweroff", "on_reboot", "on_crash"):
        _sub(dom, event, "destroy")
    devices = _sub(dom, "devices")
    _disk(devices, spec.root, "raw", "vda", "virtio", readonly=True, relabel=False)
    if spec.home is not None:
        _disk(devices, spec.home, "qcow2", HOME_TARGET, "virtio")
    if spec.entry_root is not None:
        _entry_root(devices, spec.entry_root)
    if spec.tmp_disk is not None:
        _tmp_disk(devices, spec.tmp_disk)
    for index, path in enumerate(spec.data_disks):
        _data_disk(devices, path, index)
    target, bus = (CDROM_TARGET, "ide") if gpu is None else ("sda", "sata")
    _disk(devices, spec.cdrom, "raw", target, bus, device="cdrom", readonly=True)
    _sub(devices, "controller", type="usb", model="none")
    if gpu is not None:
        _gpu(devices, gpu)
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
