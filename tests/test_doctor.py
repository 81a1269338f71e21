"""`vmjudge doctor`: a real boot on a healthy host; a plain sentence for each broken part."""

from __future__ import annotations

import json
import os

import pytest

from vmjudge.supervisor.checks import Check

from .test_image_build import vmjudge


def test_doctor_boots_a_job_and_passes_and_reads_the_running_test_vms_qemu(site, image, conn):
    """One doctor run (a VM boot each costs the suite's time), read as its JSON and as the lines the
    text output prints from the same checks. #33: after its test boot, a line each for what confines
    the test VM's qemu, read from /proc while it ran. On this machine: qemu as libvirt-qemu with no
    capabilities, NoNewPrivs 1, Seccomp 2, only the judge's devices, its memory capped; TCG and
    security model none are warnings under the suite's trial profile (production fails them:
    tests/test_confinement.py)."""
    proc = vmjudge("--home", str(site.home), "doctor", "--challenge", "examples/minimal", "--json")
    report = json.loads(proc.stdout)
    assert proc.returncode == 0 and report["ok"], proc.stdout + proc.stderr
    checks = {c["name"]: c for c in report["checks"]}
    assert set(checks) == {"qemu", "libvirt", "cpu", "home", "cores", "image", "accel", "boundary", "user", "caps",
                           "nnp", "seccomp", "lsm", "devices", "memory"}
    assert checks["cpu"]["detail"].startswith(f'cpu = "{site.guest_cpu.setting}" under {site.accel}: ')
    assert checks["accel"]["detail"].startswith(f"{site.accel}: test job booted")
    assert "interfaces: lo only" in checks["accel"]["detail"]
    assert report["profile"] == "trial"  # the suite's (conftest.py): what production refuses is a warning
    lines = {c["name"]: Check(**c).line() for c in report["checks"]}  # what `doctor` without --json prints
    assert lines["user"].startswith("ok    user       qemu runs as libvirt-qemu (uid ")
    assert lines["caps"] == "ok    caps       qemu holds no capabilities (CapEff 0, CapPrm 0)"
    assert lines["nnp"].startswith("ok    nnp        NoNewPrivs 1: nothing qemu runs can gain privileges")
    assert lines["seccomp"].startswith("ok    seccomp    Seccomp 2: qemu's filter (-sandbox on)")
    assert lines["devices"].startswith("ok    devices    qemu has only the judge's devices (")
    assert lines["memory"].startswith("ok    memory     qemu's memory cgroup is capped at ")
    if site.accel == "tcg":
        assert lines["boundary"].startswith("warn  boundary   tcg: qemu emulates every guest instruction, and QEMU "
                                            "does not hold TCG to be a security boundary")
    assert lines["lsm"].startswith(("warn  lsm        security model none: no AppArmor or SELinux confines qemu",
                                    "ok    lsm        apparmor confines qemu as libvirt-"))
    names = [c["name"] for c in report["checks"]]
    assert names[names.index("accel"):] == ["accel", "boundary", "user", "caps", "nnp", "seccomp", "lsm", "devices",
                                            "memory"]


def test_doctor_names_an_unreachable_libvirt(site, image, conn):
    proc = vmjudge("--home", str(site.home), "doctor", "--challenge", "examples/minimal",
                   env={"VMJUDGE_URI": "qemu:///system?socket=/nonexistent/libvirt-sock"})
    assert proc.returncode == 1
    lines = {line.split()[1]: line for line in proc.stdout.splitlines()}
    assert lines["libvirt"].startswith("FAIL") and "cannot reach libvirt" in lines["libvirt"]
    assert "libvirtd -d" in lines["libvirt"]
    assert lines["accel"].startswith("FAIL") and "not tried" in lines["accel"]


def test_doctor_refuses_a_home_qemu_cannot_reach(tmp_path, site, conn):
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    proc = vmjudge("--home", str(closed / "home"), "doctor")
    lines = {line.split()[1]: line for line in proc.stdout.splitlines()}
    assert proc.returncode == 1
    assert lines["home"].startswith("FAIL") and "libvirt's qemu cannot open VM files" in lines["home"]
    assert lines["image"].startswith("FAIL") and "vmjudge image build" in lines["image"]


@pytest.mark.parametrize("accel, says", [
    ("kvm", "the test boot under kvm failed (the VM would not start: unsupported flags (0x1) in function "
            "testDomainCreateXML): if KVM does not work on this host, set accel = \"tcg\" under [libvirt] in "
            "site.toml (or VMJUDGE_ACCEL=tcg)."),
    ("tcg", "the test boot under tcg failed: the VM would not start: unsupported flags (0x1) in function "
            "testDomainCreateXML"),
])
def test_doctor_fails_when_the_accelerator_cannot_start_a_vm(site, image, accel, says):
    """Every run, whatever the host: libvirt's built-in test driver takes the domain but never
    starts a guest, as a broken emulator or accelerator would not."""
    proc = vmjudge("--home", str(site.home), "doctor", "--challenge", "examples/minimal",
                   env={"VMJUDGE_URI": "test:///default", "VMJUDGE_ACCEL": accel})
    lines = {line.split()[1]: line for line in proc.stdout.splitlines()}
    assert proc.returncode == 1, proc.stdout + proc.stderr
    if accel == "kvm" and not os.access("/dev/kvm", os.R_OK | os.W_OK):  # a host without KVM at all
        assert lines["kvm"].startswith("FAIL") and "accel is kvm but /dev/kvm is missing" in lines["kvm"]
        says = "the test boot was not tried: fix the checks above first."
    else:
        assert all(lines[name].startswith("ok") for name in ("qemu", "libvirt", "home", "image")), proc.stdout
    assert lines["accel"].startswith("FAIL") and lines["accel"].split(None, 2)[2] == says, lines["accel"]


def test_doctor_proves_kvm_or_says_to_use_tcg(site, image, conn):
    """Either the accelerator boots a VM for real, or doctor says to switch to TCG (nested KVM here fails)."""
    proc = vmjudge("--home", str(site.home), "doctor", "--challenge", "examples/minimal", "--json",
                   env={"VMJUDGE_ACCEL": "kvm"})
    accel = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}["accel"]
    if accel["ok"]:
        assert proc.returncode == 0 and accel["detail"].startswith("kvm: test job booted")
    else:
        assert proc.returncode == 1
        assert 'set accel = "tcg" under [libvirt] in site.toml' in accel["detail"]
