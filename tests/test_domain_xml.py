"""The domain XML: what the judge's VMs must and must not have."""

from __future__ import annotations

import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import libvirt
import pytest

from vmjudge.images import build
from vmjudge.images.image import GuestImage
from vmjudge.vm.domain_xml import (
    ENTRY_ROOT_SERIAL,
    ENTRY_ROOT_TARGET,
    DomainSpec,
    cdrom_xml,
    domain_xml,
    entry_root_xml,
    hard_limit_kib,
    home_disk_xml,
)
from vmjudge.vm.memory import MARGIN_MIB, TCG_BOOKKEEPING_MIB, TCG_CACHE_MIB, VFIO_MIB, hard_limit_mib
from vmjudge.vm.pinning import CpuTune, SlotCores
from vmjudge.vm.warm import Seat, Shape, restore_xml


def spec(**kw):
    base = {"name": "vmj-e1-prep-0a1b", "kernel": Path("/img/vmlinuz"), "initrd": Path("/img/initrd.img"),
            "root": Path("/img/root.sqfs"), "home": Path("/run/home.qcow2"), "cdrom": Path("/run/job.iso"),
            "console_log": Path("/run/console.log")}
    base.update(kw)
    return DomainSpec(**base)


def test_no_network_usb_graphics_or_balloon():
    dom = ET.fromstring(domain_xml(spec()))
    devices = dom.find("devices")
    assert devices.findall("interface") == []
    assert devices.findall("graphics") == [] and devices.findall("video") == []
    assert [c.get("model") for c in devices.findall("controller[@type='usb']")] == ["none"]
    assert devices.find("memballoon").get("model") == "none"
    assert devices.findall("hostdev") == [] and devices.findall("filesystem") == []


def test_disks_root_readonly_home_writable_cdrom():
    devices = ET.fromstring(domain_xml(spec())).find("devices")
    disks = {d.find("target").get("dev"): d for d in devices.findall("disk")}
    assert disks["vda"].find("readonly") is not None
    assert disks["vda"].find("source").get("file") == "/img/root.sqfs"
    assert disks["vdb"].find("readonly") is None and disks["vdb"].find("driver").get("type") == "qcow2"
    assert disks["hdc"].get("device") == "cdrom" and disks["hdc"].find("readonly") is not None


def test_direct_kernel_boot_and_stop_on_any_exit():
    dom = ET.fromstring(domain_xml(spec(channel="virtio")))
    assert dom.find("os/kernel").text == "/img/vmlinuz"
    assert "console=ttyS0" in dom.find("os/cmdline").text
    assert "vmjudge.channel=virtio" in dom.find("os/cmdline").text
    assert [dom.find(e).text for e in ("on_poweroff", "on_reboot", "on_crash")] == ["destroy"] * 3
    assert dom.find("devices/serial/source").get("path") == "/run/console.log"
    assert dom.find("devices/channel/target").get("type") == "virtio"


@pytest.mark.parametrize("accel, dtype", [("kvm", "kvm"), ("tcg", "qemu")])
def test_accelerator_is_a_setting(accel, dtype):
    assert ET.fromstring(domain_xml(spec(accel=accel))).get("type") == dtype


def test_uart_channel_is_a_second_serial_port():
    devices = ET.fromstring(domain_xml(spec(channel="uart"))).find("devices")
    assert devices.findall("channel") == []
    assert sorted(s.find("target").get("port") for s in devices.findall("serial")) == ["0", "1"]


def test_paths_are_escaped_by_the_library():
    odd = Path("/run/a'b\"<c>&d.qcow2")
    dom = ET.fromstring(domain_xml(spec(home=odd)))
    homes = [d for d in dom.find("devices").findall("disk") if d.find("target").get("dev") == "vdb"]
    assert homes[0].find("source").get("file") == str(odd)


# The CPU domain as main generated it before the GPU domain existed: a GPU option must leave
# every existing VM exactly as it was, byte for byte (its memory bound is set once it runs: memory.py).
# Under TCG its guest CPU is now "max" (#41), where qemu's default, qemu64, lacked SSSE3 to AVX2.
CPU_XML_KVM_VIRTIO = (
    '<domain type="kvm"><name>vmj-e1-prep-0a1b</name><memory unit="MiB">2048</memory><vcpu>2</vcpu>'
    '<os><type arch="x86_64" machine="pc">hvm</type><kernel>/img/vmlinuz</kernel><initrd>/img/initrd.img</initrd>'
    '<cmdline>console=ttyS0 quiet loglevel=3 preempt=full acpi=noirq panic=1 oops=panic vmjudge.channel=virtio'
    '</cmdline></os>'
    '<features><acpi /></features><cpu mode="host-passthrough" /><clock offset="utc" />'
    '<on_poweroff>destroy</on_poweroff><on_reboot>destroy</on_reboot><on_crash>destroy</on_crash><devices>'
    '<disk type="file" device="disk"><driver name="qemu" type="raw" error_policy="stop" rerror_policy="stop" />'
    '<source file="/img/root.sqfs"><seclabel model="dac" relabel="no" /></source>'
    '<target dev="vda" bus="virtio" /><readonly /></disk>'
    '<disk type="file" device="disk"><driver name="qemu" type="qcow2" error_policy="stop" rerror_policy="stop" />'
    '<source file="/run/home.qcow2" /><target dev="vdb" bus="virtio" /></disk>'
    '<disk type="file" device="cdrom"><driver name="qemu" type="raw" error_policy="stop" rerror_policy="stop" />'
    '<source file="/run/job.iso" /><target dev="hdc" bus="ide" /><readonly /></disk>'
    '<controller type="usb" model="none" /><serial type="file"><source path="/run/console.log" />'
    '<target port="0" /></serial><channel type="pty"><target type="virtio" name="org.vmjudge.data" /></channel>'
    '<rng model="virtio"><backend model="random">/dev/urandom</backend></rng><memballoon model="none" />'
    '</devices></domain>'
)
CPU_XML_TCG_UART = (
    '<domain type="qemu"><name>vmj-e1-prep-0a1b</name><memory unit="MiB">2048</memory><vcpu>2</vcpu>'
    '<os><type arch="x86_64" machine="pc">hvm</type><kernel>/img/vmlinuz</kernel><initrd>/img/initrd.img</initrd>'
    '<cmdline>console=ttyS0 quiet loglevel=3 preempt=full acpi=noirq panic=1 oops=panic vmjudge.channel=uart a=1'
    '</cmdline></os>'
    '<features><acpi /></features><cpu mode="maximum"><feature policy="disable" name="erms" />'
    '<feature policy="disable" name="fsrm" /></cpu><clock offset="utc" />'
    '<on_poweroff>destroy</on_poweroff><on_reboot>destroy</on_reboot><on_crash>destroy</on_crash><devices>'
    '<disk type="file" device="disk"><driver name="qemu" type="raw" error_policy="stop" rerror_policy="stop" />'
    '<source file="/img/root.sqfs"><seclabel model="dac" relabel="no" /></source>'
    '<target dev="vda" bus="virtio" /><readonly /></disk>'
    '<disk type="file" device="disk"><driver name="qemu" type="qcow2" error_policy="stop" rerror_policy="stop" />'
    '<source file="/run/home.qcow2" /><target dev="vdb" bus="virtio" /></disk>'
    '<disk type="file" device="cdrom"><driver name="qemu" type="raw" error_policy="stop" rerror_policy="stop" />'
    '<source file="/run/job.iso" /><target dev="hdc" bus="ide" /><readonly /></disk>'
    '<controller type="usb" model="none" /><serial type="file"><source path="/run/console.log" />'
    '<target port="0" /></serial><serial type="pty"><target port="1" /></serial>'
    '<rng model="virtio"><backend model="random">/dev/urandom</backend></rng><memballoon model="none" />'
    '</devices></domain>'
)


def test_each_vcpu_and_the_emulator_pinned_to_the_slots_cores():
    dom = ET.fromstring(domain_xml(spec(vcpus=2, cputune=SlotCores((2, 3)).tune(2))))
    tune = dom.find("cputune")
    assert [(p.get("vcpu"), p.get("cpuset")) for p in tune.findall("vcpupin")] == [("0", "2"), ("1", "3")]
    assert tune.find("emulatorpin").get("cpuset") == "2-3"
    # Without pinning the element is absent, and a pinning for another VM size is refused.
    assert ET.fromstring(domain_xml(spec())).find("cputune") is None
    with pytest.raises(ValueError, match="names 1 vCPUs for a VM of 2"):
        domain_xml(spec(vcpus=2, cputune=CpuTune(("0",), "0")))


def test_cpu_domain_is_byte_for_byte_unchanged():
    assert domain_xml(spec()) == CPU_XML_KVM_VIRTIO
    assert domain_xml(spec(accel="tcg", channel="uart", cmdline_extra=("a=1",))) == CPU_XML_TCG_UART


# --- The GPU domain (#14): the same VM on q35, with one host GPU passed through by VFIO.

GPU = "0000:65:00.0"


def gpu_devices(**kw):
    return ET.fromstring(domain_xml(spec(gpu=GPU, **kw))).find("devices")


def test_gpu_domain_is_q35_with_one_unmanaged_vfio_hostdev():
    dom = ET.fromstring(domain_xml(spec(gpu="0000:65:1f.3")))
    assert dom.find("os/type").get("machine") == "q35"
    hostdevs = dom.find("devices").findall("hostdev")
    assert len(hostdevs) == 1
    hostdev = hostdevs[0]
    assert (hostdev.get("mode"), hostdev.get("type"), hostdev.get("managed")) == ("subsystem", "pci", "no")
    assert hostdev.find("driver").get("name") == "vfio"
    source = hostdev.find("source/address")
    assert dict(source.attrib) == {"domain": "0x0000", "bus": "0x65", "slot": "0x1f", "function": "0x3"}


def test_gpu_sits_on_its_own_pcie_root_port():
    devices = gpu_devices()
    ports = devices.findall("controller[@type='pci'][@model='pcie-root-port']")
    assert len(ports) == 1
    assert devices.find("controller[@type='pci'][@model='pcie-root']").get("index") == "0"
    guest = devices.find("hostdev/address")
    assert guest.get("type") == "pci"
    assert int(guest.get("bus"), 16) == int(ports[0].get("index")) != 0
    assert (int(guest.get("slot"), 16), int(guest.get("function"), 16)) == (0, 0)


def test_gpu_domain_cdrom_is_sata_and_read_only():
    disks = {d.find("target").get("dev"): d for d in gpu_devices().findall("disk")}
    assert sorted(disks) == ["sda", "vda", "vdb"]  # no IDE disk left: q35 has no IDE controller
    cdrom = disks["sda"]
    assert cdrom.get("device") == "cdrom" and cdrom.find("target").get("bus") == "sata"
    assert cdrom.find("readonly") is not None and cdrom.find("source").get("file") == "/run/job.iso"
    assert disks["vda"].find("readonly") is not None and disks["vdb"].find("readonly") is None


def test_gpu_domain_has_no_network_usb_graphics_or_balloon():
    devices = gpu_devices()
    assert devices.findall("interface") == []
    assert devices.findall("graphics") == [] and devices.findall("video") == []
    assert [c.get("model") for c in devices.findall("controller[@type='usb']")] == ["none"]
    assert devices.find("memballoon").get("model") == "none"  # VFIO pins guest RAM: a balloon could not shrink it


def test_gpu_domain_is_the_cpu_domain_but_for_the_gpu():
    """Everything but the machine, the CD-ROM's bus, the GPU itself and the pc machine's
    interrupt routing (acpi=noirq: q35 has no PIRQ table to fall back on) is the CPU domain's, to
    the byte."""
    for kw in ({}, {"channel": "uart", "memory_mib": 16384, "vcpus": 4}):
        gpu = ET.fromstring(domain_xml(spec(gpu=GPU, **kw)))
        gpu.find("os/type").set("machine", "pc")
        cmdline = gpu.find("os/cmdline")
        assert "acpi=noirq" not in cmdline.text.split()
        cmdline.text = cmdline.text.replace("preempt=full", "preempt=full acpi=noirq")
        devices = gpu.find("devices")
        for el in devices.findall("controller[@type='pci']") + devices.findall("hostdev"):
            devices.remove(el)
        target = next(d for d in devices.findall("disk") if d.get("device") == "cdrom").find("target")
        target.attrib.update(dev="hdc", bus="ide")
        assert ET.tostring(gpu, encoding="unicode") == domain_xml(spec(**kw))


@pytest.mark.parametrize("address", ["65:00.0", "0000:65:00", "0000:65:00.8", "0000:65:20.0", "0000:6g:00.0",
                                     "0000:065:00.0", " 0000:65:00.0", "0000:65:00.0\n", ""])
def test_a_malformed_gpu_address_is_refused(address):
    with pytest.raises(ValueError, match="PCI address"):
        domain_xml(spec(gpu=address))


def test_a_gpu_needs_kvm():
    with pytest.raises(ValueError, match="kvm"):
        domain_xml(spec(gpu=GPU, accel="tcg"))


# --- What libvirt itself says of the XML (the acceptance): its schema, and a driver's parser.

PINNED = SlotCores((2, 3)).tune(2)


@pytest.mark.parametrize("gpu, cputune", [(None, None), (GPU, None), (None, PINNED), (GPU, PINNED)])
def test_libvirt_schema_validates_the_domain(gpu, cputune, tmp_path):
    path = tmp_path / "domain.xml"
    path.write_text(domain_xml(spec(gpu=gpu, cputune=cputune)))
    proc = subprocess.run(["virt-xml-validate", str(path), "domain"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr + proc.stdout


@pytest.mark.parametrize("gpu", [None, GPU])
def test_libvirt_test_driver_defines_the_domain(gpu):
    """The test driver runs libvirt's own domain parser and post-parse checks without a
    hypervisor, so it takes the GPU domain on a host without a GPU. It is not qemu's driver: it
    neither opens the card nor checks the machine's buses (tried: it accepts a hostdev on a bus
    no controller provides, and IDE on q35), which is why the tests above pin the root port and
    the SATA CD-ROM themselves. So this shows libvirt parses the XML as meant, not that qemu
    will start it."""
    conn = libvirt.open("test:///default")
    try:
        dom = conn.defineXML(domain_xml(spec(gpu=gpu, cputune=PINNED)))
        try:
            back = ET.fromstring(dom.XMLDesc())
        finally:
            dom.undefine()
    finally:
        conn.close()
    assert back.find("os/type").get("machine") == ("pc" if gpu is None else "q35")
    hostdevs = back.find("devices").findall("hostdev")
    if gpu is None:
        assert hostdevs == []
    else:
        assert [h.get("managed") for h in hostdevs] == ["no"]
        assert hostdevs[0].find("source/address").get("bus") == "0x65"
        assert hostdevs[0].find("address").get("bus") == "0x01"
    tune = back.find("cputune")
    assert [(p.get("vcpu"), p.get("cpuset")) for p in tune.findall("vcpupin")] == [("0", "2"), ("1", "3")]
    assert tune.find("emulatorpin").get("cpuset") == "2-3"


def test_a_warm_state_is_saved_without_a_home_disk_or_a_medium_and_restored_with_this_runs_paths():
    """vm/warm.py: the state holds neither disk of a job; a restore gets its own console log,
    its slot's pinning and a new pty; the devices given after are the cold VM's very own."""
    saved = domain_xml(spec(home=None, cdrom=None, cputune=CpuTune(("0",), "0"), vcpus=1,
                            cmdline_extra=("vmjudge.warm=1",)))
    devices = ET.fromstring(saved).find("devices")
    assert [d.find("target").get("dev") for d in devices.findall("disk")] == ["vda", "hdc"]
    assert devices.find("disk[@device='cdrom']/source") is None
    # As libvirt gives it back: the pty it had, which the restored VM will not have.
    dom = ET.fromstring(saved)
    ET.SubElement(dom.find("devices/channel"), "source", path="/dev/pts/7")
    restored = ET.fromstring(restore_xml(ET.tostring(dom, encoding="unicode"),
                                         spec(vcpus=1, console_log=Path("/run/stage/console.log"),
                                              cputune=CpuTune(("1",), "1"))))
    assert restored.find("devices/serial[@type='file']/source").get("path") == "/run/stage/console.log"
    assert restored.find("devices/channel/source") is None
    assert [p.get("cpuset") for p in restored.findall("cputune/*")] == ["1", "1"]
    assert restore_xml(saved, spec(vcpus=1)).count("cputune") == 0
    cold = {d.find("target").get("dev"): ET.tostring(d) for d in ET.fromstring(domain_xml(spec())).find("devices")
            .findall("disk")}
    assert ET.tostring(ET.fromstring(home_disk_xml(Path("/run/home.qcow2")))) == cold["vdb"]
    assert ET.tostring(ET.fromstring(cdrom_xml(Path("/run/job.iso")))) == cold["hdc"]


# --- A container entry's root (#39): a read-only disk of its own, given cold and warm alike.

def test_a_container_entrys_root_is_a_read_only_virtio_disk_found_by_its_serial():
    devices = ET.fromstring(domain_xml(spec(entry_root=Path("/results/1/root.sqfs")))).find("devices")
    disks = {d.find("target").get("dev"): d for d in devices.findall("disk")}
    assert list(disks) == ["vda", "vdb", ENTRY_ROOT_TARGET, "hdc"]
    root = disks[ENTRY_ROOT_TARGET]
    assert root.find("source").get("file") == "/results/1/root.sqfs"
    assert root.find("target").get("bus") == "virtio" and root.find("driver").get("type") == "raw"
    assert root.find("readonly") is not None and root.find("serial").text == ENTRY_ROOT_SERIAL
    # Relabelled by libvirt for the run (no seclabel of ours), unlike the image's root shared by every VM.
    assert root.find("source/seclabel") is None
    assert ENTRY_ROOT_SERIAL in (Path(build.GUEST_DIR) / "root_disk.py").read_text()  # the agent looks for it


def test_the_entry_root_disk_passes_libvirts_schema(tmp_path):
    path = tmp_path / "domain.xml"
    path.write_text(domain_xml(spec(entry_root=Path("/results/1/root.sqfs"))))
    proc = subprocess.run(["virt-xml-validate", str(path), "domain"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr + proc.stdout


def test_a_warm_state_is_the_same_for_archive_and_container_runs_and_the_root_is_given_after_the_restore():
    seat = Seat(Path("/warm"), 0, GuestImage(Path("/img"), {"key": "k" * 20}), Shape("tcg", 1, 512), "wabc")
    archive, container = spec(), spec(entry_root=Path("/results/1/root.sqfs"))
    assert seat._saving_spec(container) == seat._saving_spec(archive)
    assert seat._saving_spec(container).entry_root is None
    cold = {d.find("target").get("dev"): ET.tostring(d) for d in ET.fromstring(domain_xml(container)).find("devices")
            .findall("disk")}
    assert ET.tostring(ET.fromstring(entry_root_xml(Path("/results/1/root.sqfs")))) == cold[ENTRY_ROOT_TARGET]


# --- qemu's own memory bounded (#33): set on the running domain (Domain.bound_memory), so no start
# or restore XML carries a <memtune>, whose hard limit libvirt would also make qemu's locked-memory
# rlimit (memory.py); a state libvirt saved with its bound is restored without it, then bounded.

@pytest.mark.parametrize("kw, mib", [
    ({"memory_mib": 384, "accel": "kvm"}, 384 + MARGIN_MIB),
    ({"memory_mib": 1024, "accel": "tcg"}, 1024 + MARGIN_MIB + TCG_CACHE_MIB + TCG_BOOKKEEPING_MIB),
    ({"memory_mib": 16384, "accel": "kvm", "gpu": GPU}, 16384 + MARGIN_MIB + VFIO_MIB),
])
def test_each_domain_has_its_bound_and_no_memtune_to_start_from(kw, mib):
    assert hard_limit_kib(spec(**kw)) == mib * 1024
    assert hard_limit_mib(kw["memory_mib"], kw["accel"], "gpu" in kw) == mib
    assert ET.fromstring(domain_xml(spec(**kw))).find("memtune") is None


def test_a_restore_starts_without_the_bound_the_state_was_saved_with():
    """libvirt saves the live XML, the bound its VM ran under included (added here to the recorded
    tests/confinement/saved-domain.xml, `virsh save-image-dumpxml` of a real warm state, made before
    the bound existed); the restore's XML leaves it out, and the runner bounds the restored domain."""
    recorded = (Path(__file__).parent / "confinement" / "saved-domain.xml").read_text()
    saved = ET.fromstring(recorded)
    ET.SubElement(ET.SubElement(saved, "memtune"), "hard_limit", unit="KiB").text = str(hard_limit_kib(spec()))
    run = spec(accel="tcg", vcpus=1, memory_mib=1024)
    for xml in (recorded, ET.tostring(saved, encoding="unicode")):
        assert ET.fromstring(restore_xml(xml, run)).find("memtune") is None


def test_the_restored_domain_passes_libvirts_schema(tmp_path):
    path = tmp_path / "domain.xml"
    recorded = (Path(__file__).parent / "confinement" / "saved-domain.xml").read_text()
    path.write_text(restore_xml(recorded, spec(accel="tcg", vcpus=1, memory_mib=1024)))
    proc = subprocess.run(["virt-xml-validate", str(path), "domain"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr + proc.stdout
