"""What confines an entry's qemu (#33), on the host alone: the readings of /proc and libvirt's
capabilities, doctor's lines for every branch, and the daemon's refusal under the production profile.

This machine shows one case for real (qemu as libvirt-qemu with no capabilities, NoNewPrivs 1,
Seccomp 2, security model none, TCG): its files were recorded from a running judge VM; the cases
it cannot show (qemu as root, no seccomp, AppArmor) are in tests/confinement/, what each file is
and where it came from in its README. The running VM itself is read in test_confinement_vm.py.
The daemon's refusal is shown for real: a `vmjudge daemon` under profile = "production" on this
machine (TCG, no security driver) reads libvirt, starts no VM, and says why in one sentence.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

import libvirt
import pytest

from vmjudge.config import Site
from vmjudge.errors import InfrastructureError
from vmjudge.supervisor import confinement
from vmjudge.supervisor.confinement import Observed, checks, problems
from vmjudge.vm.devices import xml_kinds
from vmjudge.vm.domain import Domain
from vmjudge.vm.memory import hard_limit_mib
from vmjudge.vm.qemu_process import NotFound, memory_limit, qemu_pid, read_qemu
from vmjudge.vm.runner import _start
from vmjudge.vm.security import dac_ids, lsm, sandboxed, security_models

from .cli import run_cli

FILES = Path(__file__).parent / "confinement"
PID = 4242
NAME = "vmj-w2cf16f-03418c3ed7-tcg-1c-1024m-0"
LIMIT_KIB = hard_limit_mib(1024, "tcg", False) * 1024
# A running judge domain's devices as libvirt gives them back (the recorded warm state's XML is its
# live XML when it was saved), then the home disk and the job CD a warm start gives it.
LIVE_DEVICES = (*xml_kinds((FILES / "saved-domain.xml").read_text()), "disk/disk/virtio")


def proc_tree(tmp_path: Path, status: str, cmdline: str = "cmdline-warm-cpu.txt") -> tuple[Path, Path, Path]:
    """/proc/PID, libvirt's pid file and the v1 memory cgroup, as this machine lays them out,
    from the recorded (or derived) files; the limit is the one libvirt writes for the VM's hard limit."""
    proc, run, cgroups = tmp_path / "proc", tmp_path / "run", tmp_path / "cgroup"
    (proc / str(PID)).mkdir(parents=True)
    shutil.copy(FILES / status, proc / str(PID) / "status")
    args = (FILES / cmdline).read_text().splitlines()
    (proc / str(PID) / "cmdline").write_bytes(b"\0".join(a.encode() for a in args) + b"\0")
    cgroup = (FILES / "cgroup-v1-hybrid").read_text()
    (proc / str(PID) / "cgroup").write_text(cgroup)
    domain_dir = cgroups / "memory" / "machine" / "qemu-612-vmj-w2cf16f-03418c3ed7-tcg-1c-1024m-0.libvirt-qemu"
    domain_dir.mkdir(parents=True)
    (domain_dir / "memory.limit_in_bytes").write_text(f"{LIMIT_KIB * 1024}\n")
    for parent in (cgroups / "memory" / "machine", cgroups / "memory"):
        (parent / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    run.mkdir()
    (run / f"{NAME}.pid").write_text(f"{PID}")
    return proc, run, cgroups


def observed(tmp_path: Path, status: str = "status-libvirt-qemu", cmdline: str = "cmdline-warm-cpu.txt",
             capabilities: str = "capabilities-this-host.xml", label: str = "", enforcing: bool = False) -> Observed:
    proc, run, cgroups = proc_tree(Path(tempfile.mkdtemp(dir=tmp_path)), status, cmdline)
    qemu = read_qemu(qemu_pid(NAME, run_dir=run, proc=proc), proc=proc, cgroups=cgroups)
    models = security_models((FILES / capabilities).read_text())
    return Observed(qemu=qemu, lsm=lsm(models), label=label, enforcing=enforcing, hard_limit_kib=LIMIT_KIB,
                    memory_mib=1024, gpu=False, live_devices=LIVE_DEVICES)


def lines(site: Site, seen: Observed, accel: str = "tcg") -> dict[str, str]:
    return {c.name: c.line() for c in checks(site, seen, accel)}


def production(tmp_path: Path, **kw) -> Site:
    return Site(home=tmp_path, accel="tcg", profile="production", **kw)


# --- The readings.

def test_the_recorded_qemu_of_this_machine_reads_as_confined(tmp_path):
    seen = observed(tmp_path)
    q = seen.qemu
    assert (q.pid, q.uid, q.gid, q.cap_eff, q.cap_prm, q.no_new_privs, q.seccomp) == (PID, 64055, 64055, 0, 0, 1, 2)
    assert q.memory_limit == LIMIT_KIB * 1024 and q.limit_file.endswith(".libvirt-qemu/memory.limit_in_bytes")
    assert "-nodefaults" in q.argv and f"guest={NAME},debug-threads=on" in q.argv
    assert seen.lsm == "none"


def test_a_stale_pid_file_is_not_taken_for_the_domains_qemu(tmp_path):
    proc, run, _ = proc_tree(tmp_path, "status-libvirt-qemu")
    (run / "vmj-other-0.pid").write_text(f"{PID}")  # the pid now another domain's qemu (or anything)
    with pytest.raises(NotFound, match="is not domain vmj-other-0's qemu"):
        qemu_pid("vmj-other-0", run_dir=run, proc=proc)
    with pytest.raises(NotFound, match="no qemu process for domain vmj-gone"):
        qemu_pid("vmj-gone", run_dir=run, proc=proc)


def test_the_cgroup_v2_limit_is_read_where_libvirt_under_systemd_puts_it(tmp_path):
    """cgroup v2 alone (Debian 12 with systemd): qemu's threads sit in …scope/libvirt/emulator, the
    limit on …scope/libvirt; the tightest limit from the process's group up is the one that binds."""
    scope = tmp_path / "machine.slice" / r"machine-qemu\x2d3\x2dvmj\x2dx.scope"
    (scope / "libvirt" / "emulator").mkdir(parents=True)
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    for d, v in ((scope / "libvirt" / "emulator", "max"), (scope / "libvirt", "1610612736"), (scope, "max"),
                 (tmp_path / "machine.slice", "max")):
        (d / "memory.max").write_text(v + "\n")
    cgroup = "0::/machine.slice/machine-qemu\\x2d3\\x2dvmj\\x2dx.scope/libvirt/emulator\n"
    assert memory_limit(cgroup, tmp_path) == (1610612736, str(scope / "libvirt" / "memory.max"))
    (scope / "libvirt" / "memory.max").write_text("max\n")
    assert memory_limit(cgroup, tmp_path) == (None, None)


def test_libvirts_capabilities_name_its_security_driver_and_qemus_user():
    here = security_models((FILES / "capabilities-this-host.xml").read_text())
    assert (lsm(here), dac_ids(here, "qemu"), dac_ids(here, "kvm")) == ("none", (64055, 64055), (64055, 64055))
    armoured = security_models((FILES / "capabilities-apparmor.xml").read_text())
    assert (lsm(armoured), dac_ids(armoured, "kvm")) == ("apparmor", (487, 486))
    root = security_models((FILES / "capabilities-root-qemu.xml").read_text())
    assert dac_ids(root, "kvm") == (0, 0)
    assert sandboxed((FILES / "cmdline-warm-cpu.txt").read_text().splitlines())
    assert not sandboxed((FILES / "cmdline-no-sandbox.txt").read_text().splitlines())


# --- The bound, set on the paused domain: libvirt's own test driver takes it as the qemu driver does
# (into the live <memtune>), and refuses it on a domain that does not run.

TEST_DOMAIN = "<domain type='test'><name>{}</name><memory>524288</memory><os><type>hvm</type></os></domain>"


def test_the_bound_goes_into_the_live_domain_and_a_refusal_is_the_judges_failure():
    conn = libvirt.open("test:///default")
    try:
        running = Domain(conn.createXML(TEST_DOMAIN.format("vmj-bounded"), 0))
        running.bound_memory(LIMIT_KIB)
        assert f"<hard_limit unit='KiB'>{LIMIT_KIB}</hard_limit>" in running.live_xml()
        running.destroy()
        stopped = Domain(conn.defineXML(TEST_DOMAIN.format("vmj-stopped")))
        with pytest.raises(InfrastructureError) as err:
            stopped.bound_memory(LIMIT_KIB)
        assert err.value.reason == "vm-start"
        assert str(err.value).startswith("libvirt would not bound the memory of domain vmj-stopped (")
        assert "no VM runs unbounded" in str(err.value) and "cgroup_controllers" in str(err.value)
    finally:
        for name in conn.listDefinedDomains():
            if name == "vmj-stopped":
                conn.lookupByName(name).undefine()
        conn.close()


class Unboundable:
    """A started domain whose bound libvirt refuses (as its qemu driver does with no memory cgroup
    controller): the libvirt calls are the point, so they are recorded."""

    def __init__(self):
        self.calls: list[str] = []

    def name(self) -> str:
        return "vmj-unboundable"

    def connect(self) -> Unboundable:
        return self

    def isAlive(self) -> int:
        return 1

    def createXML(self, xml: str, flags: int) -> Unboundable:
        self.calls.append("start paused" if flags == libvirt.VIR_DOMAIN_START_PAUSED else "start")
        return self

    def setMemoryParameters(self, params: dict, flags: int) -> int:
        self.calls.append(f"bound {params[libvirt.VIR_DOMAIN_MEMORY_HARD_LIMIT]}")
        raise libvirt.libvirtError("Requested operation is not valid: cgroup memory controller is not mounted")

    def destroy(self) -> int:
        self.calls.append("destroy")
        return 0


@pytest.mark.parametrize("gpu", [None, "0000:65:00.0"])
def test_a_vm_whose_bound_is_refused_never_runs_and_the_stage_fails_as_infrastructure(gpu):
    """Started paused, refused its bound, destroyed before anything resumed it; an
    InfrastructureError (retried, never the entry's), not a GPU fault even with a card lent."""
    dom = Unboundable()
    with pytest.raises(InfrastructureError) as err:
        _start(dom, "qemu:///system", "<domain/>", gpu, LIMIT_KIB)  # type: ignore[arg-type]
    assert dom.calls == ["start paused", f"bound {LIMIT_KIB}", "destroy"]
    assert type(err.value) is InfrastructureError and err.value.reason == "vm-start"
    assert str(err.value).startswith("libvirt would not bound the memory of domain vmj-unboundable (")


# --- doctor's lines, each branch.

def test_this_machine_under_trial_warns_of_tcg_and_no_security_model_and_passes_the_rest(tmp_path):
    said = lines(Site(home=tmp_path, profile="trial"), observed(tmp_path))
    for name in ("user", "caps", "nnp", "seccomp", "devices", "memory"):
        assert said[name].startswith("ok  "), said[name]
    assert said["user"].endswith("qemu runs as libvirt-qemu (uid 64055): an entry that escapes the guest is no root")
    assert said["boundary"].startswith("warn  boundary   tcg: qemu emulates every guest instruction")
    assert said["boundary"].endswith('in site.toml (profile = "trial": not refused).')
    assert said["lsm"].startswith("warn  lsm        security model none: no AppArmor or SELinux confines qemu")
    assert "apt-get install apparmor" in said["lsm"] and 'profile = "trial": not refused' in said["lsm"]
    assert said["memory"].endswith(f"capped at {LIMIT_KIB // 1024} MiB (the guest's 1024 MiB and qemu's own; "
                                   "memory.limit_in_bytes)")


def test_this_machine_under_production_fails_on_tcg_and_no_security_model(tmp_path):
    found = {c.name: c for c in checks(production(tmp_path), observed(tmp_path), "tcg")}
    assert [n for n, c in found.items() if not c.ok] == ["boundary", "lsm"]
    assert found["boundary"].detail == ("tcg: qemu emulates every guest instruction, and QEMU does not hold TCG to "
                                        "be a security boundary: use a host where KVM works and set accel = \"kvm\" "
                                        "under [libvirt] in site.toml.")
    assert "set allow_no_lsm = true under [site] in site.toml" in found["lsm"].detail
    allowed = {c.name: c for c in checks(production(tmp_path, allow_no_lsm=True), observed(tmp_path), "kvm")}
    assert allowed["lsm"].ok and allowed["lsm"].warn and "(allow_no_lsm = true: not refused" in allowed["lsm"].detail
    assert allowed["boundary"].ok and not allowed["boundary"].warn


def test_qemu_as_root_without_its_sandbox_fails_each_line_with_its_qemu_conf_key(tmp_path):
    said = lines(production(tmp_path), observed(tmp_path, "status-root-no-sandbox", "cmdline-no-sandbox.txt"), "kvm")
    assert said["user"] == ("FAIL  user       qemu runs as root: an entry that escapes the guest is root on this host: "
                            'set user = "libvirt-qemu" and group = "libvirt-qemu" in /etc/libvirt/qemu.conf and '
                            "restart libvirtd.")
    assert said["caps"].startswith("FAIL  caps       qemu holds capabilities (CapEff 000001ffffffffff, "
                                   "CapPrm 000001ffffffffff)")
    assert "clear_emulator_capabilities = 1" in said["caps"]
    assert said["nnp"].startswith("FAIL  nnp        NoNewPrivs 0") and "seccomp_sandbox = 1" in said["nnp"]
    assert said["seccomp"] == ("FAIL  seccomp    Seccomp 0: qemu runs without its system-call filter: set "
                               "seccomp_sandbox = 1 in /etc/libvirt/qemu.conf and restart libvirtd.")
    assert said["devices"].startswith("ok  ")  # -sandbox is no device: the allow-list is about what the VM has
    regained = lines(production(tmp_path), replace(seen := observed(tmp_path), qemu=replace(seen.qemu,
                                                                                         cap_prm=0x400)), "kvm")
    assert regained["caps"].startswith("FAIL  caps       qemu holds capabilities (CapEff 0000000000000000, CapPrm "
                                       "0000000000000400)")  # none effective, but one it may make so again


def test_apparmor_confining_qemu_passes_and_one_in_complain_mode_fails(tmp_path):
    label = "libvirt-d3650d34-2d95-4e33-9987-da52969eb692"
    seen = observed(tmp_path, capabilities="capabilities-apparmor.xml", label=label, enforcing=True)
    said = lines(production(tmp_path), seen, "kvm")
    assert said["lsm"] == (f"ok    lsm        apparmor confines qemu as {label} (enforcing): an escaped entry opens "
                           "only this VM's own files")
    complain = lines(production(tmp_path), replace(seen, enforcing=False), "kvm")
    assert complain["lsm"].startswith("FAIL  lsm        apparmor is libvirt's security driver but this qemu's label")
    assert "aa-enforce" in complain["lsm"]


def test_a_device_off_the_list_and_a_missing_bound_fail(tmp_path):
    seen = observed(tmp_path)
    nic = replace(seen, qemu=replace(seen.qemu, argv=(*seen.qemu.argv, "-netdev", "user,id=n0", "-device",
                                                      "e1000,netdev=n0")))
    said = lines(production(tmp_path), nic, "kvm")
    assert said["devices"].startswith("FAIL  devices    qemu's command line or running domain has what a judge VM "
                                      "must not: -device e1000, -netdev:")
    plugged = lines(production(tmp_path), replace(seen, live_devices=(*seen.live_devices, "interface")), "kvm")
    assert plugged["devices"].startswith("FAIL  devices    qemu's command line or running domain has what a judge VM "
                                         "must not: <interface> in the running domain:")  # given after the start
    unbound = lines(production(tmp_path), replace(seen, qemu=replace(seen.qemu, memory_limit=None, limit_file=None)))
    assert unbound["memory"].startswith(f"FAIL  memory     the domain's hard limit is {LIMIT_KIB // 1024} MiB but "
                                        "qemu's memory cgroup limit is none")


# --- The daemon's refusal.

def test_the_refusal_names_each_problem_libvirt_shows(tmp_path):
    here = security_models((FILES / "capabilities-this-host.xml").read_text())
    sandbox = (FILES / "cmdline-warm-cpu.txt").read_text().splitlines()
    kvm = Site(home=tmp_path, accel="kvm")
    assert problems(kvm, here, sandbox) == [
        "libvirt has no security driver confining qemu (install AppArmor (apt-get install apparmor), leave "
        "security_driver unset in /etc/libvirt/qemu.conf (or set it to \"apparmor\") and restart libvirtd, or set "
        "allow_no_lsm = true under [site] in site.toml)"]
    assert problems(replace(kvm, allow_no_lsm=True), here, sandbox) == []
    armoured = security_models((FILES / "capabilities-apparmor.xml").read_text())
    assert problems(kvm, armoured, sandbox) == []
    root = security_models((FILES / "capabilities-root-qemu.xml").read_text())
    bare = (FILES / "cmdline-no-sandbox.txt").read_text().splitlines()
    assert [p.split(" (")[0] for p in problems(replace(kvm, allow_no_lsm=True), root, bare)] == [
        "libvirt starts qemu as root", "libvirt starts qemu without its seccomp filter"]


def daemon_env(**extra: str) -> dict[str, str]:
    """The suite's VMJUDGE_PROFILE=trial emptied, which leaves the profile to site.toml."""
    return {"VMJUDGE_PROFILE": "", **extra}


def test_the_production_daemon_refuses_this_machine_in_one_sentence_and_trial_runs(tmp_path):
    """On this machine (TCG, security model none), for real: no VM starts, libvirt is only asked.
    site.toml says production here (the suite's VMJUDGE_PROFILE=trial taken away); trial judges."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "site.toml").write_text('[site]\nprofile = "production"\n')
    env = daemon_env(VMJUDGE_ACCEL="tcg")
    refused = run_cli("daemon", "--until-idle", home=home, env=env)
    assert refused.returncode == 1
    assert refused.stderr.count("\n") == 1 and refused.stderr.count(". ") == 0, refused.stderr
    assert refused.stderr == (
        "vmjudge: profile = \"production\" refuses to judge on this host: its guests would run under TCG, which QEMU "
        "does not hold to be a security boundary (use a host where KVM works and set accel = \"kvm\" under [libvirt] "
        "in site.toml); libvirt has no security driver confining qemu (install AppArmor (apt-get install apparmor), "
        "leave security_driver unset in /etc/libvirt/qemu.conf (or set it to \"apparmor\") and restart libvirtd, or "
        "set allow_no_lsm = true under [site] in site.toml); or set profile = \"trial\" under [site] in site.toml for "
        "a host that judges no real entries (`vmjudge doctor` shows every check).\n")
    assert not (home / "daemon.lock").exists()  # refused before it took the home, so before any VM
    archive = tmp_path / "x-entry.tar.gz"
    archive.write_bytes(b"")
    evaluated = run_cli("evaluate", "nosuch", str(archive), home=home, env=env)
    assert (evaluated.returncode, evaluated.stderr) == (1, refused.stderr)  # before the entry would be queued
    trial = run_cli("daemon", "--until-idle", home=home, env={**env, "VMJUDGE_PROFILE": "trial"})
    assert trial.returncode == 0 and re.fullmatch(r"\S+ 0 entries ended, 0 stages run, in \d+ s\n", trial.stderr), \
        trial.stderr  # the seconds are the daemon's start-up on a busy host: not the point


def test_allow_no_lsm_is_the_production_daemons_first_line(tmp_path):
    """Under kvm (asked of libvirt, never started: the queue is empty) with allow_no_lsm, nothing is
    refused on this machine, and the daemon's first line says what it runs without."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "site.toml").write_text("[site]\nallow_no_lsm = true\n")
    done = run_cli("daemon", "--until-idle", home=home, env=daemon_env(VMJUDGE_ACCEL="kvm"))
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[0] == (  # then the summary: nothing queued, nothing started
        "WARNING profile = \"production\" with allow_no_lsm = true (site.toml [site]): qemu may run with no AppArmor "
        "or SELinux profile, so an entry that escapes its guest may open whatever the qemu user may.")


def test_a_trial_site_is_never_refused_and_asks_libvirt_nothing(tmp_path):
    """Not even a libvirt that does not answer: the suite's daemons start as before."""
    assert confinement.refusal(Site(home=tmp_path, accel="tcg", profile="trial",
                                    uri="qemu:///system?socket=/nonexistent")) is None
