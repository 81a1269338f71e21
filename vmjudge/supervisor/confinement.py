"""Is the qemu that runs an entry confined? `vmjudge doctor`'s lines, read from its running test
VM, and the daemon's refusal under the production profile, read through libvirt before any VM.

An entry is hostile code, and one that breaks out of the guest kernel is in the qemu process:
QEMU holds TCG to be no security boundary, so production needs KVM, and a qemu that runs as no
root user, holds no capabilities, cannot gain any (NoNewPrivs), makes only the system calls its
seccomp filter allows, is confined by AppArmor or SELinux, has only the judge's devices and a
bounded memory. libvirt does all of that by default on Debian with AppArmor; these lines show
whether it did here, each with what it means and the fix (a qemu.conf key, a package).

The daemon cannot read a qemu before it starts one, and must not start one to find out, so its
check reads what libvirt says it will do (vm/security.py): the accelerator, the uid of its DAC
label, `-sandbox on` in the command line it would use, and its security driver. The doctor's
lines are the proof, read from /proc while the test VM runs (vm/qemu_process.py).
"""

from __future__ import annotations

import logging
import pwd
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import libvirt

from ..config import Site
from ..errors import ConfigError, InfrastructureError, VmjudgeError
from ..vm import domain as vm_domain
from ..vm.devices import qemu_devices, unlisted_kinds, unlisted_qemu, xml_kinds
from ..vm.domain_xml import DomainSpec, domain_xml
from ..vm.qemu_process import QemuProcess, qemu_pid, read_qemu
from ..vm.security import SecurityModel, dac_ids, lsm, planned_argv, sandboxed, security_models
from .checks import Check

log = logging.getLogger(__name__)

QEMU_CONF = "/etc/libvirt/qemu.conf"
RESTART = "and restart libvirtd"
FIX_USER = f'set user = "libvirt-qemu" and group = "libvirt-qemu" in {QEMU_CONF} {RESTART}'
FIX_CAPS = f"set clear_emulator_capabilities = 1 (and a user other than root) in {QEMU_CONF} {RESTART}"
FIX_SECCOMP = f"set seccomp_sandbox = 1 in {QEMU_CONF} {RESTART}"
FIX_LSM = ("install AppArmor (apt-get install apparmor), leave security_driver unset in "
           f"{QEMU_CONF} (or set it to \"apparmor\") {RESTART}, or set allow_no_lsm = true under [site] in site.toml")
FIX_TCG = 'use a host where KVM works and set accel = "kvm" under [libvirt] in site.toml'
TRIAL = ' (profile = "trial": not refused)'


class Unconfined(ConfigError):
    """The production profile on a host that does not confine qemu: the daemon will not start."""


@dataclass(frozen=True)
class Observed:
    """What was read of one running VM's qemu."""

    qemu: QemuProcess
    lsm: str  # libvirt's security driver for qemu: apparmor, selinux or none
    label: str  # the label it gave this domain ("" under none)
    enforcing: bool
    hard_limit_kib: int | None  # the live domain's <memtune><hard_limit>
    memory_mib: int
    gpu: bool
    # The live domain's devices (devices.xml_kinds): those given to it after qemu started (a warm
    # start's home disk and a container entry's root, hot-plugged) are here and not in qemu.argv.
    live_devices: tuple[str, ...] = ()


def observe(conn: libvirt.virConnect, dom: vm_domain.Domain, gpu: bool) -> Observed:
    """Read now, while the domain runs: a process on this machine (qemu_process.NotFound else)."""
    qemu = read_qemu(qemu_pid(dom.name))
    live = ET.fromstring(dom.live_xml())
    limit = live.find("memtune/hard_limit")
    memory = live.find("memory")
    label, enforcing = dom.security_label()
    devices = tuple(xml_kinds(ET.tostring(live, encoding="unicode")))
    return Observed(qemu=qemu, lsm=lsm(security_models(conn.getCapabilities())), label=label, enforcing=enforcing,
                    hard_limit_kib=_kib(limit), memory_mib=(_kib(memory) or 0) // 1024, gpu=gpu,
                    live_devices=devices)


def _kib(el: ET.Element | None) -> int | None:
    if el is None or el.text is None:
        return None
    scale = {"KiB": 1, "k": 1, "MiB": 1024, "M": 1024, "GiB": 1 << 20, "G": 1 << 20}.get(el.get("unit", "KiB"), 1)
    return int(el.text) * scale


def checks(site: Site, seen: Observed, accel: str) -> list[Check]:
    """One line each: the accelerator, qemu's user, capabilities, NoNewPrivs, seccomp, security
    driver, devices and memory bound. What production refuses is FAIL under it, warn under trial."""
    trial = site.profile == "trial"

    def refused(name: str, detail: str, fix: str) -> Check:
        return Check(name, trial, f"{detail}: {fix}" + (TRIAL if trial else "") + ".", warn=trial)

    q = seen.qemu
    found = [
        Check("boundary", True, "kvm: the guest runs on hardware virtualisation, qemu's own code only for its devices")
        if accel == "kvm" else refused("boundary", "tcg: qemu emulates every guest instruction, and QEMU does not "
                                       "hold TCG to be a security boundary", FIX_TCG),
        Check("user", True, f"qemu runs as {_user(q.uid)} (uid {q.uid}): an entry that escapes the guest is no root")
        if q.uid != 0 else refused("user", "qemu runs as root: an entry that escapes the guest is root on this host",
                                   FIX_USER),
        Check("caps", True, "qemu holds no capabilities (CapEff 0, CapPrm 0)") if q.cap_eff == q.cap_prm == 0 else
        refused("caps", f"qemu holds capabilities (CapEff {q.cap_eff:016x}, CapPrm {q.cap_prm:016x}): an escaped "
                "entry may use them", FIX_CAPS),
        Check("nnp", True, "NoNewPrivs 1: nothing qemu runs can gain privileges (setuid, file capabilities)")
        if q.no_new_privs == 1 else refused("nnp", "NoNewPrivs 0: a program qemu runs could gain privileges "
                                            "(qemu sets it with its seccomp filter)", FIX_SECCOMP),
        Check("seccomp", True, "Seccomp 2: qemu's filter (-sandbox on) denies obsolete, privilege-raising, "
              "process-spawning and resource-control system calls") if q.seccomp == 2 else
        refused("seccomp", f"Seccomp {q.seccomp}: qemu runs without its system-call filter", FIX_SECCOMP),
        _lsm_check(site, seen),
        _devices_check(site, seen),
        _memory_check(site, seen),
    ]
    return found


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _lsm_check(site: Site, seen: Observed) -> Check:
    if seen.lsm != "none":
        how = "enforcing" if seen.enforcing else "NOT enforcing (complain mode)"
        if seen.enforcing and seen.label:
            return Check("lsm", True, f"{seen.lsm} confines qemu as {seen.label} ({how}): an escaped entry opens "
                         "only this VM's own files")
        return Check("lsm", site.profile == "trial", f"{seen.lsm} is libvirt's security driver but this qemu's label "
                     f"is {seen.label or 'empty'} ({how}): put its profile in enforce mode (aa-enforce) {RESTART}.",
                     warn=site.profile == "trial")
    if site.allow_no_lsm or site.profile == "trial":
        why = "allow_no_lsm = true" if site.allow_no_lsm else 'profile = "trial"'
        return Check("lsm", True, f"security model none: no AppArmor or SELinux confines qemu, so an escaped entry "
                     f"may open whatever the qemu user may ({why}: not refused; the fix: {FIX_LSM}).", warn=True)
    return Check("lsm", False, "security model none: no AppArmor or SELinux confines qemu, so an escaped entry may "
                 f"open whatever the qemu user may: {FIX_LSM}.")


def _devices_check(site: Site, seen: Observed) -> Check:
    """qemu's command line (what it started with) and the running domain's XML (what it has now,
    devices given after the start included), each against the allow-list."""
    q = seen.qemu
    extra = unlisted_qemu(q.argv, seen.gpu) + [f"<{k}> in the running domain"
                                                for k in unlisted_kinds(seen.live_devices, implicit=True)]
    if extra:
        return Check("devices", site.profile == "trial", f"qemu's command line or running domain has what a judge VM "
                     f"must not: {', '.join(extra)}: a libvirt hook or qemu.conf setting adds it; remove it.",
                     warn=site.profile == "trial")
    counts = Counter(qemu_devices(q.argv))
    listed = ", ".join(f"{d} ×{n}" if n > 1 else d for d, n in sorted(counts.items()))
    disks = sum(1 for k in seen.live_devices if k.startswith("disk/"))
    return Check("devices", True, f"qemu has only the judge's devices ({listed}; {disks} drives in the running "
                 "domain), -nodefaults, no NIC, USB or display")


def _memory_check(site: Site, seen: Observed) -> Check:
    q = seen.qemu
    if seen.hard_limit_kib is None:
        return Check("memory", False, "the running test VM has no <memtune><hard_limit>, which the judge sets on "
                     "every domain before its guest runs: a vmjudge bug; report it.")
    want = seen.hard_limit_kib * 1024
    if q.memory_limit != want:
        got = "none" if q.memory_limit is None else f"{q.memory_limit // 2**20} MiB ({q.limit_file})"
        return Check("memory", site.profile == "trial", f"the domain's hard limit is {want // 2**20} MiB but qemu's "
                     f"memory cgroup limit is {got}: enable the memory controller (cgroup_controllers in {QEMU_CONF}) "
                     f"{RESTART}.", warn=site.profile == "trial")
    return Check("memory", True, f"qemu's memory cgroup is capped at {want // 2**20} MiB (the guest's "
                 f"{seen.memory_mib} MiB and qemu's own; {Path(str(q.limit_file)).name})")


# --- The daemon's refusal: production on a host that does not confine qemu.

def refusal(site: Site) -> str | None:
    """Why a production daemon must not start here, in one sentence; None when it may (or the
    site is a trial). Read through libvirt, no VM started."""
    if site.profile != "production":
        return None
    problems = []
    if site.accel == "tcg":
        problems.append(f"its guests would run under TCG, which QEMU does not hold to be a security boundary "
                        f"({FIX_TCG})")
    try:
        problems += _libvirt_problems(site)
    except VmjudgeError:
        if not problems:  # libvirt not answering is the daemon's own failure to report, as it always was
            raise
    if not problems:
        return None
    return (f"profile = \"production\" refuses to judge on this host: {'; '.join(problems)}; or set profile = "
            "\"trial\" under [site] in site.toml for a host that judges no real entries (`vmjudge doctor` "
            "shows every check).")


def _libvirt_problems(site: Site) -> list[str]:
    conn = vm_domain.connect(site.uri)
    try:
        try:
            capabilities = conn.getCapabilities()
        except libvirt.libvirtError as exc:
            raise InfrastructureError("libvirt-unreachable", f"libvirt would not give its capabilities "
                                      f"({exc.get_error_message()}).") from None
        argv = planned_argv(conn, domain_xml(probe_spec(site)))
    finally:
        conn.close()
    return problems(site, security_models(capabilities), argv)


def problems(site: Site, models: list[SecurityModel], argv: list[str]) -> list[str]:
    """What production refuses in libvirt's capabilities (`models`) and the command line it would
    start the judge's VM with (`argv`), each with its fix."""
    found = []
    ids = dac_ids(models, "kvm" if site.accel == "kvm" else "qemu")
    if ids is not None and ids[0] == 0:
        found.append(f"libvirt starts qemu as root ({FIX_USER})")
    if not sandboxed(argv):
        found.append(f"libvirt starts qemu without its seccomp filter ({FIX_SECCOMP})")
    if lsm(models) == "none" and not site.allow_no_lsm:
        found.append(f"libvirt has no security driver confining qemu ({FIX_LSM})")
    return found


def probe_spec(site: Site) -> DomainSpec:
    """The judge's own CPU domain, whose command line libvirt is asked for (its files need not exist)."""
    where = Path("/nonexistent")
    return DomainSpec(name=f"{vm_domain.DOMAIN_PREFIX}{site.domain_tag}-probe", kernel=where / "vmlinuz",
                      initrd=where / "initrd.img", root=where / "root.sqfs", home=where / "home.qcow2",
                      cdrom=where / "job.iso", console_log=where / "console.log", accel=site.accel, vcpus=1,
                      memory_mib=512, channel=site.channel)


def notice(site: Site) -> str | None:
    """The production daemon's first line when allow_no_lsm lets it judge with no security driver."""
    if site.profile != "production" or not site.allow_no_lsm:
        return None
    return ("profile = \"production\" with allow_no_lsm = true (site.toml [site]): qemu may run with no AppArmor or "
            "SELinux profile, so an entry that escapes its guest may open whatever the qemu user may.")
