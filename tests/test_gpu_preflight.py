"""GPU hosts (#14), on the host only: site.toml's [gpu] table, and the preflight that reads
sysfs before a GPU is lent to a VM, against fake sysfs trees shaped like Linux's (no GPU is
lent to these machines)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vmjudge.config import GpuSite, load_site
from vmjudge.errors import ConfigError
from vmjudge.supervisor.doctor import Check, gpu_checks
from vmjudge.vm.gpu_preflight import check_gpu, describe, read_gpu

from .cli import run_cli
from .docs_page import section
from .fake_sysfs import T4, FakeHost


def write_site(home: Path, text: str) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    (home / "site.toml").write_text(text)
    return home


def test_no_gpu_table_means_no_gpu_and_the_t4_allowed(tmp_path):
    gpu = load_site(tmp_path).gpu
    assert gpu == GpuSite()
    assert (gpu.devices, gpu.sysfs, gpu.dev, gpu.ids) == ((), Path("/sys"), Path("/dev"), ("10de:1eb8",))


def test_gpu_table_is_read(tmp_path):
    write_site(tmp_path, '[gpu]\ndevices = ["0000:65:00.0", "0000:b3:1f.7"]\nsysfs = "/tmp/fake/sys"\n'
                         'dev = "/tmp/fake/dev"\nids = ["10de:1eb8", "10de:2236"]\n')
    gpu = load_site(tmp_path).gpu
    assert gpu.devices == ("0000:65:00.0", "0000:b3:1f.7")
    assert (gpu.sysfs, gpu.dev) == (Path("/tmp/fake/sys"), Path("/tmp/fake/dev"))
    assert gpu.ids == ("10de:1eb8", "10de:2236")


ADDRESSES = "PCI addresses as `lspci -D` prints them, in lowercase, such as \"0000:65:00.0\""


@pytest.mark.parametrize("text, says", [
    ('devices = ["65:00.0"]', f"[gpu] devices has '65:00.0', which is not allowed: use {ADDRESSES}."),
    ('devices = ["0000:65:00.0A"]', f"[gpu] devices has '0000:65:00.0A', which is not allowed: use {ADDRESSES}."),
    ('devices = ["0000:65:00.8"]', f"[gpu] devices has '0000:65:00.8', which is not allowed: use {ADDRESSES}."),
    ('devices = ["0000:65:20.0"]', f"[gpu] devices has '0000:65:20.0', which is not allowed: use {ADDRESSES}."),
    ('devices = ["0000:B3:00.0"]', f"[gpu] devices has '0000:B3:00.0', which is not allowed: use {ADDRESSES}."),
    ('devices = [650000]', f"[gpu] devices has 650000, which is not allowed: use {ADDRESSES}."),
    ('devices = "0000:65:00.0"', f"[gpu] devices = '0000:65:00.0' is not allowed: use {ADDRESSES}."),
    ('devices = ["0000:65:00.0", "0000:66:00.0", "0000:65:00.0"]',
     "[gpu] devices names '0000:65:00.0' more than once, which is not allowed: name each GPU once (each is one "
     "slot)."),
    ('ids = ["10DE:1EB8"]', "[gpu] ids has '10DE:1EB8', which is not allowed: use vendor:device ids in lowercase "
                            "hex, such as \"10de:1eb8\" (a T4)."),
    ('ids = ["10de"]', "[gpu] ids has '10de', which is not allowed: use vendor:device ids in lowercase hex, such as "
                       "\"10de:1eb8\" (a T4)."),
    ('ids = []', "[gpu] ids = [] is not allowed: name at least one vendor:device id, such as \"10de:1eb8\" (a T4), "
                 "or leave the key out for that."),
    ('ids = ["10de:1eb8", "10de:1eb8"]', "[gpu] ids names '10de:1eb8' more than once, which is not allowed: name "
                                         "each id once."),
    ('sysfs = "sys"', "[gpu] sysfs = 'sys' is not allowed: use an absolute path, such as \"/sys\" (tests point it "
                      "at a fake tree)."),
    ('dev = 1', "[gpu] dev = 1 is not allowed: use an absolute path, such as \"/dev\" (tests point it at a fake "
                "tree)."),
    ('device = ["0000:65:00.0"]', "[gpu] has unknown key(s) device: remove or correct them."),
])
def test_bad_gpu_values_are_refused_with_what_is_allowed(tmp_path, text, says):
    write_site(tmp_path, f"[gpu]\n{text}\n")
    with pytest.raises(ConfigError) as err:
        load_site(tmp_path)
    assert str(err.value) == f"{tmp_path / 'site.toml'}: {says}"


@pytest.fixture
def host(tmp_path):
    return FakeHost(tmp_path)


def sentences(host: FakeHost, address: str = T4, **gpu) -> list[str]:
    return check_gpu(host.gpu(address, **gpu), address)


BIND = ("`options vfio-pci ids=10de:1eb8`, `softdep nouveau pre: vfio-pci` and `softdep nvidia pre: vfio-pci` in "
        "/etc/modprobe.d/vfio.conf, blacklist nouveau (`blacklist nouveau` in /etc/modprobe.d/blacklist-nouveau.conf), "
        "run `update-initramfs -u` and reboot.")


def test_a_good_t4_passes_and_is_described(host):
    host.add(T4)
    assert sentences(host) == []
    assert describe(read_gpu(host.gpu(), T4)) == ("10de:1eb8 3D controller on vfio-pci, IOMMU group 14 (alone), "
                                                  "reset by bus")


def test_a_missing_device_names_the_address_and_lspci(host):
    host.add(T4)
    assert sentences(host, "0000:66:00.0") == [
        f"there is no PCI device 0000:66:00.0 ({host.sys}/bus/pci/devices/0000:66:00.0 is missing): correct [gpu] "
        "devices in site.toml; `lspci -D` lists the addresses."]


def test_a_card_of_another_vendor_is_refused(host):
    host.add(T4, ids="1002:67df", pci_class="0x030000")  # an AMD VGA card: a display controller, not a T4
    assert sentences(host) == [
        f"{T4} is 1002:67df (VGA controller), not an allowed GPU (10de:1eb8): check the address with `lspci -Dnn`, "
        "or add its id to [gpu] ids in site.toml."]


def test_another_model_passes_once_its_id_is_allowed(host):
    host.add(T4, ids="10de:2236")  # an A10
    assert sentences(host, ids=("10de:1eb8", "10de:2236")) == []
    assert "not an allowed GPU (10de:1eb8)" in sentences(host)[0]


def test_a_device_that_is_no_display_controller_is_refused(host):
    host.add(T4, pci_class="0x040300")  # the id of a T4, the class of an audio function
    assert sentences(host) == [
        f"{T4} has class 0x040300, which is no display controller's (0x0300xx VGA or 0x0302xx 3D): check the address "
        "with `lspci -Dnn` and correct [gpu] devices in site.toml."]


def test_a_network_card_at_the_address_gets_both_sentences(host):
    host.add(T4, ids="8086:1533", pci_class="0x020000")
    found = sentences(host)
    assert len(found) == 2
    assert found[0].startswith(f"{T4} is 8086:1533 (class 0x020000), not an allowed GPU (10de:1eb8)")
    assert found[1].startswith(f"{T4} has class 0x020000, which is no display controller's")


@pytest.mark.parametrize("driver, bound", [("nvidia", "bound to nvidia"), ("nouveau", "bound to nouveau"),
                                           (None, "bound to no driver")])
def test_a_card_not_on_vfio_pci_is_told_how_to_bind_it(host, driver, bound):
    host.add(T4, driver=driver)
    assert sentences(host) == [f"{T4} is {bound}, not vfio-pci, so it cannot be passed to a VM: put {BIND}"]


def test_the_bind_line_names_the_configured_ids(host):
    host.add(T4, driver="nouveau")
    found = sentences(host, ids=("10de:1eb8", "10de:2236"))
    assert "`options vfio-pci ids=10de:1eb8,10de:2236`" in found[0]


def test_a_group_shared_with_a_bridge_and_a_function_on_vfio_pci_is_viable(host):
    host.add(T4)
    host.add("0000:64:00.0", ids="8086:2030", pci_class="0x060400", driver="pcieport")
    host.add("0000:65:00.1", ids="10de:10fa", pci_class="0x040300", driver="vfio-pci")
    assert sentences(host) == []
    assert describe(read_gpu(host.gpu(), T4)) == ("10de:1eb8 3D controller on vfio-pci, IOMMU group 14 (0000:64:00.0 "
                                                  "bridge, 0000:65:00.1 on vfio-pci), reset by bus")


def test_a_group_shared_with_a_device_a_host_driver_holds_is_not_viable(host):
    host.add(T4)
    host.add("0000:64:00.0", ids="8086:2030", pci_class="0x060400", driver="pcieport")
    host.add("0000:65:00.1", ids="10de:10fa", pci_class="0x040300", driver="snd_hda_intel")
    assert sentences(host) == [
        f"IOMMU group 14 is not viable: 0000:65:00.1 (class 0x040300, driver snd_hda_intel) shares it with {T4}; "
        "bind it to vfio-pci too or move the card to another slot."]


def test_every_blocking_member_of_the_group_is_named(host):
    host.add(T4)
    host.add("0000:65:00.1", ids="10de:10fa", pci_class="0x040300", driver=None)
    host.add("0000:65:00.2", ids="8086:1533", pci_class="0x020000", driver="igb")
    host.add("0000:66:00.0", ids="8086:1533", pci_class="0x020000", driver="igb", group="15")  # another group
    assert sentences(host) == [
        f"IOMMU group 14 is not viable: 0000:65:00.1 (class 0x040300, no driver), 0000:65:00.2 (class 0x020000, "
        f"driver igb) share it with {T4}; bind them to vfio-pci too or move the card to another slot."]


def test_no_iommu_says_firmware_and_kernel_command_line(tmp_path):
    host = FakeHost(tmp_path, iommu=False)
    host.add(T4)
    assert sentences(host) == [
        f"the IOMMU is off ({host.sys}/kernel/iommu_groups is empty or missing), so no device can be passed to a "
        "VM: enable VT-d (Intel) or AMD-Vi (AMD) in the firmware setup and, on Intel, add `intel_iommu=on` to "
        "GRUB_CMDLINE_LINUX in /etc/default/grub (AMD's IOMMU is on by default), run `update-grub` and reboot."]


def test_no_iommu_groups_directory_at_all_is_the_same(tmp_path):
    host = FakeHost(tmp_path, iommu=False)
    host.add(T4)
    (host.sys / "kernel" / "iommu_groups").rmdir()
    assert [s.split(",")[0] for s in sentences(host)] == [
        f"the IOMMU is off ({host.sys}/kernel/iommu_groups is empty or missing)"]


def test_a_card_outside_every_group_while_the_iommu_is_on(host):
    host.add("0000:00:02.0", ids="8086:3e92", pci_class="0x030000", driver="i915", group="0")
    host.add(T4)
    (host.sys / "bus" / "pci" / "devices" / T4 / "iommu_group").unlink()
    (host.sys / "kernel" / "iommu_groups" / "14" / "devices" / T4).unlink()
    assert sentences(host) == [
        f"{T4} is in no IOMMU group, so VFIO cannot take it: check that the firmware's IOMMU covers this slot "
        "(`dmesg | grep -i -e DMAR -e IOMMU`) or move the card to another slot."]


def test_no_dev_vfio_says_modprobe(tmp_path):
    host = FakeHost(tmp_path, vfio=False)
    host.add(T4)
    assert sentences(host) == [
        f"{host.dev}/vfio/vfio is missing, so qemu cannot reach VFIO: load vfio-pci (`modprobe vfio-pci`, and add "
        "vfio-pci to /etc/modules to keep it loaded after a reboot)."]


def test_an_empty_reset_method_says_how_to_restore_it(host):
    host.add(T4, reset="")
    path = host.sys / "bus" / "pci" / "devices" / T4 / "reset_method"
    assert sentences(host) == [
        f"{T4} has every reset method switched off ({path} is empty), so the card cannot be reset between entries: "
        f"run `echo default > {path}` and remove whatever empties it at boot."]


def test_no_reset_method_at_all_says_to_give_the_card_its_own_slot(host):
    host.add(T4, reset=None)
    assert sentences(host) == [
        f"{T4} has no reset method ({host.sys}/bus/pci/devices/{T4}/reset_method is missing), so the card cannot be "
        "reset between entries: a T4 has no function-level reset and needs a bus reset, which needs it alone on "
        "its bus, so put it in a slot of its own (on a kernel of 5.15 or later, as Debian 12's)."]


def test_a_host_with_nothing_done_gets_every_sentence_host_first(tmp_path):
    """Everything at once, so that one reboot can fix it all: the host's VFIO and IOMMU first."""
    host = FakeHost(tmp_path, iommu=False, vfio=False)
    host.add(T4, driver="nouveau", reset="flr bus")
    found = sentences(host)
    assert [s.split(" ")[:3] for s in found] == [[f"{host.dev}/vfio/vfio", "is", "missing,"],
                                                 ["the", "IOMMU", "is"], [T4, "is", "bound"]]
    assert describe(read_gpu(host.gpu(), T4)).endswith("reset by flr or bus")


def test_doctor_has_no_gpu_line_without_gpu_devices(host):
    host.add(T4)
    assert gpu_checks(GpuSite(sysfs=host.sys, dev=host.dev)) == []


def test_doctor_gives_each_gpu_a_line_ok_with_its_description_or_fail_with_every_sentence(host):
    host.add(T4)
    host.add("0000:b3:00.0", driver="nvidia", group="40", reset="")
    good, bad = gpu_checks(host.gpu(T4, "0000:b3:00.0"))
    assert good == Check(f"gpu {T4}", True, describe(read_gpu(host.gpu(), T4)))
    assert good.line() == (f"ok    gpu {T4} 10de:1eb8 3D controller on vfio-pci, IOMMU group 14 (alone), "
                           "reset by bus")
    assert (bad.name, bad.ok) == ("gpu 0000:b3:00.0", False)
    assert bad.detail == " ".join(check_gpu(host.gpu(), "0000:b3:00.0"))
    assert bad.detail.startswith("0000:b3:00.0 is bound to nvidia, not vfio-pci") and f"put {BIND} " in bad.detail
    assert bad.detail.endswith("run `echo default > "
                               f"{host.sys}/bus/pci/devices/0000:b3:00.0/reset_method` and remove whatever empties it "
                               "at boot.")
    assert bad.line().startswith("FAIL  gpu 0000:b3:00.0 0000:b3:00.0 is bound to nvidia")


def test_vmjudge_doctor_prints_the_gpu_lines_after_the_test_boot_and_fails_on_a_broken_gpu(tmp_path, host):
    """The command itself, with no VM: libvirt's test driver, and a home without an image, so
    the boot is not tried. The GPU lines come after the boot's line, outside what decides it."""
    host.add(T4)
    host.add("0000:b3:00.0", driver="nouveau", group="40")
    home = write_site(tmp_path / "home", f'[gpu]\ndevices = ["{T4}", "0000:b3:00.0"]\nsysfs = "{host.sys}"\n'
                                         f'dev = "{host.dev}"\n')
    proc = run_cli("--home", str(home), "doctor", "--json", env={"VMJUDGE_URI": "test:///default",
                                                                 "VMJUDGE_ACCEL": "tcg"})
    report = json.loads(proc.stdout)
    assert proc.returncode == 1 and not report["ok"]
    names = [c["name"] for c in report["checks"]]
    assert names[-3:] == ["accel", f"gpu {T4}", "gpu 0000:b3:00.0"]
    gpus = {c["name"]: c for c in report["checks"][-2:]}
    assert gpus[f"gpu {T4}"]["ok"] and gpus[f"gpu {T4}"]["detail"].startswith("10de:1eb8 3D controller on vfio-pci")
    assert not gpus["gpu 0000:b3:00.0"]["ok"]
    assert "0000:b3:00.0 is bound to nouveau, not vfio-pci" in gpus["gpu 0000:b3:00.0"]["detail"]
    plain = run_cli("--home", str(home), "doctor", env={"VMJUDGE_URI": "test:///default", "VMJUDGE_ACCEL": "tcg"})
    assert plain.stdout.splitlines()[-2:] == [Check(c["name"], c["ok"], c["detail"]).line()
                                              for c in report["checks"][-2:]]


def test_the_guides_site_toml_loads_with_its_gpu_table(tmp_path):
    """The site.toml the organisers' guide shows is one load_site takes, [gpu] as written there."""
    block = section("organisers.md", "site.toml and retention").split("```toml\n", 1)[1].split("```", 1)[0]
    gpu = load_site(write_site(tmp_path, block)).gpu
    assert gpu == GpuSite(devices=("0000:65:00.0",))
