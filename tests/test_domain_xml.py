"""The domain XML: what the judge's VMs must and must not have."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from vmjudge.vm.domain_xml import DomainSpec, domain_xml


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
# every existing VM exactly as it was, byte for byte.
CPU_XML_KVM_VIRTIO = (
    '<domain type="kvm"><name>vmj-e1-prep-0a1b</name><memory unit="MiB">2048</memory><vcpu>2</vcpu>'
    '<os><type arch="x86_64" machine="pc">hvm</type><kernel>/img/vmlinuz</kernel><initrd>/img/initrd.img</initrd>'
    '<cmdline>console=ttyS0 quiet loglevel=3 panic=1 oops=panic vmjudge.channel=virtio</cmdline></os>'
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
    '<cmdline>console=ttyS0 quiet loglevel=3 panic=1 oops=panic vmjudge.channel=uart a=1</cmdline></os>'
    '<features><acpi /></features><clock offset="utc" />'
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


def test_cpu_domain_is_byte_for_byte_unchanged():
    assert domain_xml(spec()) == CPU_XML_KVM_VIRTIO
    assert domain_xml(spec(accel="tcg", channel="uart", cmdline_extra=("a=1",))) == CPU_XML_TCG_UART
