"""The judge's allow-list of VM devices (vm/devices.py, #33): every kind of domain the judge makes
has only devices on it, in its XML and in the qemu command line libvirt makes of that XML.

Kinds: CPU and GPU, each accelerator, both data channels, with and without a home disk, with a
container entry's root, cold, the VM saved as a warm state, and the restored one (from a state
libvirt really saved, recorded in tests/confinement/saved-domain.xml), with the devices given to
it after. The command line comes from libvirt's own qemu driver (domainXMLToNative), which
builds it as it would to start the VM but starts nothing: these tests need libvirtd, no VM
(a GPU's command line included, with no card). The running VM's command line is read from
/proc in tests/test_confinement_vm.py."""

from __future__ import annotations

import itertools
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from vmjudge.errors import InfrastructureError
from vmjudge.images.image import GuestImage
from vmjudge.vm import domain
from vmjudge.vm.devices import (
    QEMU_DEVICES,
    QEMU_GPU_DEVICES,
    qemu_devices,
    unlisted_qemu,
    unlisted_xml,
    xml_kinds,
)
from vmjudge.vm.domain_xml import cdrom_xml, domain_xml, entry_root_xml, home_disk_xml
from vmjudge.vm.security import planned_argv
from vmjudge.vm.warm import Seat, Shape, restore_xml

from .test_domain_xml import GPU, spec

RECORDED_SAVE = (Path(__file__).parent / "confinement" / "saved-domain.xml").read_text()
ROOT = Path("/results/1/root.sqfs")


def kinds() -> list[tuple[str, dict]]:
    """Every kind of cold domain: CPU (each accelerator and channel) and GPU, with and without a
    home disk, with and without an entry's root."""
    found = []
    for accel, channel, home, root in itertools.product(("kvm", "tcg"), ("virtio", "uart"), (True, False),
                                                        (False, True)):
        kw = {"accel": accel, "channel": channel, **({} if home else {"home": None}),
              **({"entry_root": ROOT} if root else {})}
        found.append((f"cpu-{accel}-{channel}-{'home' if home else 'nohome'}{'-root' if root else ''}", kw))
    for home, root in itertools.product((True, False), (False, True)):
        kw = {"gpu": GPU, **({} if home else {"home": None}), **({"entry_root": ROOT} if root else {})}
        found.append((f"gpu-{'home' if home else 'nohome'}{'-root' if root else ''}", kw))
    return found


KINDS = kinds()
SEAT = Seat(Path("/warm"), 0, GuestImage(Path("/img"), {"key": "k" * 20}), Shape("tcg", 2, 2048), "wabc")


@pytest.fixture(scope="module")
def qemu_driver():
    """libvirt's qemu driver, asked only for command lines (no VM, so no host lock)."""
    conn = domain.connect("qemu:///system")
    yield conn
    conn.close()


@pytest.mark.parametrize("name, kw", KINDS, ids=[k[0] for k in KINDS])
def test_every_cold_domain_has_only_allowed_devices(name, kw, qemu_driver):
    xml = domain_xml(spec(**kw))
    assert unlisted_xml(xml) == [], name
    argv = planned_argv(qemu_driver, xml)
    assert unlisted_qemu(argv, gpu="gpu" in kw) == [], name
    assert set(qemu_devices(argv)) <= (QEMU_GPU_DEVICES if "gpu" in kw else QEMU_DEVICES)


@pytest.mark.parametrize("accel", ["kvm", "tcg"])
def test_the_warm_state_the_restore_and_what_is_given_after_have_only_allowed_devices(accel, qemu_driver):
    run = spec(accel=accel, entry_root=ROOT)
    saving = domain_xml(SEAT._saving_spec(run))
    assert unlisted_xml(saving) == []
    assert unlisted_qemu(planned_argv(qemu_driver, saving), gpu=False) == []
    for saved in (saving, RECORDED_SAVE):  # ours, and one libvirt gave back (its implicit parts listed too)
        restored = restore_xml(saved, run)
        assert unlisted_xml(restored, implicit=True) == []
        assert unlisted_qemu(planned_argv(qemu_driver, restored), gpu=False) == []
    given = "".join((home_disk_xml(Path("/run/home.qcow2")), entry_root_xml(ROOT), cdrom_xml(Path("/run/job.iso"))))
    assert xml_kinds(f"<domain><devices>{given}</devices></domain>") == ["disk/disk/virtio", "disk/disk/virtio",
                                                                         "disk/cdrom/ide"]
    assert unlisted_xml(f"<domain><devices>{given}</devices></domain>") == []


def test_a_cpu_vm_with_the_virtio_channel_has_exactly_the_allow_list(qemu_driver):
    """So the list holds nothing a VM does not use: each allowed driver is there (the uart
    channel's VMs use a subset, the GPU's add the card and its ports)."""
    assert set(qemu_devices(planned_argv(qemu_driver, domain_xml(spec(accel="tcg"))))) == QEMU_DEVICES
    assert set(qemu_devices(planned_argv(qemu_driver, domain_xml(spec(gpu=GPU))))) == QEMU_GPU_DEVICES


@pytest.mark.parametrize("accel, cpu, qemu_cpu", [
    ("tcg", None, "max"), ("tcg", "qemu64", "qemu64"), ("tcg", "x86-64-v3", "kvm64,"),
    ("tcg", "Haswell-noTSX", "Haswell-noTSX"),
    ("kvm", None, "host,"), ("kvm", "x86-64-v2", "kvm64,"), ("kvm", "max", "max"),
])
def test_the_guests_cpu_changes_only_qemus_cpu_argument(accel, cpu, qemu_cpu, qemu_driver):
    """site.toml's [vm] cpu (#41) is the domain's <cpu>, which libvirt makes a -cpu argument and
    nothing else: no device, and the command line stays on the allow-list (the recorded
    tests/confinement/cmdline-*.txt predate #41: their -cpu qemu64 was libvirt's default)."""
    argv = planned_argv(qemu_driver, domain_xml(spec(accel=accel, cpu=cpu)))
    assert unlisted_qemu(argv, gpu=False) == []
    assert set(qemu_devices(argv)) == QEMU_DEVICES
    assert argv.count("-cpu") == 1 and argv[argv.index("-cpu") + 1].startswith(qemu_cpu)


@pytest.mark.parametrize("extra, xml_says, qemu_says", [
    ("<interface type='user'><model type='e1000'/></interface>", "interface", "-netdev"),
    ("<sound model='ich6'/>", "sound", "-device intel-hda"),
    ("<graphics type='vnc'/><video><model type='vga'/></video>", "graphics", "-vnc"),
    ("<input type='tablet' bus='usb'/>", "input/tablet/usb", None),  # refused by libvirt: usb model none
])
def test_a_device_off_the_list_is_named(extra, xml_says, qemu_says, qemu_driver):
    """Not vacuous: a VM given a NIC, a sound card or a display fails both checks, by name."""
    dom = ET.fromstring(domain_xml(spec(accel="tcg")))
    for el in ET.fromstring(f"<x>{extra}</x>"):
        dom.find("devices").append(el)
    xml = ET.tostring(dom, encoding="unicode")
    assert xml_says in unlisted_xml(xml)
    if qemu_says is None:
        with pytest.raises(InfrastructureError, match="USB bus is disabled"):
            planned_argv(qemu_driver, xml)
        return
    assert qemu_says in unlisted_qemu(planned_argv(qemu_driver, xml), gpu=False)


def test_the_command_line_must_keep_nodefaults():
    argv = ["/usr/bin/qemu-system-x86_64", "-no-user-config", "-device", '{"driver":"virtio-rng-pci"}',
            "-device", "e1000,netdev=n0"]
    assert unlisted_qemu(argv, gpu=False) == ["-device e1000", "no -nodefaults"]
    assert unlisted_qemu([*argv[:4], "-nodefaults"], gpu=False) == []
