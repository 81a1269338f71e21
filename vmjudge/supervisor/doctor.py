"""`vmjudge doctor`: is this host ready to judge? Each check says what to do when it fails.

The cores check refuses a site whose slots × vCPUs exceed the cores the daemon may use (as the
daemon does), unless site.toml allows overcommit; the test boot is pinned to slot 0's cores.

The guests' CPU is read from libvirt, no VM needed: what [vm] cpu gives them (its x86-64 level and
whether it has AVX, AVX2 and FMA), or, when the host cannot give it, why (cpu_gate.py refuses the
daemon the same way); with --challenge, whether that reaches the challenge's [vm] cpu_level.

The accelerator is checked by booting a trivial job for real, because /dev/kvm can exist
and still hang (nested KVM does here): only a finished boot proves it works. While that VM
runs, its qemu process is read (confinement.py): the lines after the boot say what confines
it, and what the production profile refuses is FAIL under it (warn under "trial"). Each GPU of
site.toml's [gpu] gets a line of its own after that boot, which it never holds back: a
broken GPU takes only its own slot away, and CPU entries still need the boot's answer.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import libvirt

from ..config import GpuSite, Site
from ..config.layout import RunDir
from ..errors import ConfigError, VmjudgeError
from ..images.image import GuestImage
from ..vm import cpu_offer, domain, gpu_preflight
from ..vm.job import Command, Job
from ..vm.libvirt_uri import is_local
from ..vm.pinning import SlotCores, plan_cores
from ..vm.qemu_process import NotFound
from ..vm.reading import Limits
from ..vm.runner import make_blank_disk, run_job
from . import confinement
from .checks import Check
from .cores import host_cores, slot_count
from .cpu_gate import level_shortfall

__all__ = ["Check", "as_json", "gpu_checks", "run_checks", "unreachable_parent"]

BOOT_LIMIT = {"kvm": 30.0, "tcg": 180.0}


def _qemu() -> Check:
    exe = shutil.which("qemu-system-x86_64")
    if exe is None or shutil.which("qemu-img") is None:
        return Check("qemu", False, "qemu-system-x86_64 or qemu-img is missing: run `make setup` or "
                     "`apt-get install qemu-system-x86 qemu-utils`.")
    version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    return Check("qemu", True, version)


def unreachable_parent(path: Path) -> Path | None:
    """The first directory on the way to `path` that other users (libvirt's qemu) cannot cross."""
    for parent in [*reversed(Path(path).resolve().parents), Path(path).resolve()]:
        if parent.exists() and not parent.stat().st_mode & stat.S_IXOTH:
            return parent
    return None


def _home(site: Site) -> Check:
    try:
        site.layout.ensure()
    except OSError as exc:
        return Check("home", False, f"cannot use {site.home}: {exc.strerror}; choose another with --home.")
    blocked = unreachable_parent(site.layout.runs)
    if blocked is not None:
        return Check("home", False, f"{blocked} is closed to other users, so libvirt's qemu cannot open VM files "
                     f"under {site.home}: use a home under /var/lib or /srv (--home or VMJUDGE_HOME).")
    free = shutil.disk_usage(site.home).free
    return Check("home", True, f"{site.home} ({free / 2**30:.1f} GiB free)")


def _image(image: GuestImage | None, find: Callable[[], GuestImage]) -> tuple[Check, GuestImage | None]:
    try:
        image = image or find()
        image.verify()
    except VmjudgeError as exc:
        return Check("image", False, str(exc)), None
    return Check("image", True, f"{image.directory} (kernel {image.manifest.get('kernel_version')}, "
                 f"agent {image.manifest.get('agent_version')})"), image


def _boot(site: Site, conn: libvirt.virConnect, image: GuestImage, cores: SlotCores,
          seen: dict[str, confinement.Observed | str]) -> Check:
    """The test boot; its qemu, read while it runs, goes into `seen["qemu"]` (or why it could not be read)."""
    limit = BOOT_LIMIT[site.accel]
    job = Job(commands=(Command("doctor", ("sh", "-c", "echo vmjudge-ok; ls /sys/class/net"), 10.0),))

    def read(dom: domain.Domain) -> None:
        try:
            seen["qemu"] = confinement.observe(conn, dom, gpu=False)
        except (NotFound, libvirt.libvirtError, VmjudgeError, OSError, ValueError) as exc:
            seen["qemu"] = str(exc)

    try:
        with RunDir(site.layout, "doctor") as rd:
            make_blank_disk(rd.path / "home.qcow2", 64)
            run = run_job(conn, site, image, job, home_disk=rd.path / "home.qcow2", workdir=rd.path,
                          console_log=rd.path / "console.log", vcpus=1, memory_mib=512, label="doctor",
                          limits=Limits(boot_timeout=limit, deadline=limit + 60), cores=cores, on_start=read)
    except VmjudgeError as exc:
        use_tcg = "set accel = \"tcg\" under [libvirt] in site.toml (or VMJUDGE_ACCEL=tcg)"
        if site.accel == "kvm" and getattr(exc, "reason", "") in ("guest-no-hello", "guest-deadline"):
            return Check("accel", False, f"KVM present but the test boot did not finish in {limit:.0f} s: {use_tcg}.")
        if site.accel == "kvm":
            return Check("accel", False, f"the test boot under kvm failed ({_first_line(exc)}): "
                         f"if KVM does not work on this host, {use_tcg}.")
        return Check("accel", False, f"the test boot under {site.accel} failed: {exc}")
    out = bytes(run.transcript.commands[0].output).decode() if run.transcript.commands else ""
    if "vmjudge-ok" not in out:
        return Check("accel", False, f"the test boot under {site.accel} ran but its job printed {out!r}.")
    nics = out.split()[1:]
    if nics != ["lo"]:
        return Check("accel", False, f"the guest has network interfaces {nics}; it must have only lo.")
    return Check("accel", True, f"{site.accel}: test job booted and answered in {run.boot_seconds:.1f} s "
                 f"(run {run.total_seconds:.1f} s); guest interfaces: lo only")


def _cores(site: Site, slots: int, vcpus: int, conn: libvirt.virConnect | None) -> tuple[Check, SlotCores | None]:
    """Do `slots` CPU slots (and the GPU slots) of VMs of `vcpus` fit the cores the daemon may
    use (a remote libvirt's: its host's online cores), each slot on its own? The daemon refuses
    to start on the same plan; the test boot runs on slot 0's cores, as the daemon's first slot would."""
    if conn is None and not is_local(site.uri):
        return Check("cores", False, f"libvirt at {site.uri} did not answer, so its host's cores are unknown."), None
    try:
        plan = plan_cores(host_cores(site, conn), slot_count(site, slots), vcpus, site.overcommit)
    except ConfigError as exc:  # Overcommitted, or a remote libvirt that will not list its cores
        return Check("cores", False, str(exc)), None
    where = "" if is_local(site.uri) else f"on the VM host at {site.uri}: "
    return Check("cores", True, where + plan.describe()), plan.of(0)


def _cpu(site: Site, conn: libvirt.virConnect, challenge: tuple[str, str] | None) -> Check:
    """What the guests get; `challenge`: a challenge's name and [vm] cpu_level, to be reached."""
    why = cpu_offer.refusal(site, conn)
    if why is not None:
        return Check("cpu", False, why)
    offered = cpu_offer.offer(conn, site)
    if challenge is not None:
        short = level_shortfall(*challenge, offered)
        if short is not None:
            return Check("cpu", False, f"{offered.describe()}; {short}.")
    return Check("cpu", True, offered.describe())


def run_checks(site: Site, find_image: Callable[[], GuestImage], slots: int = 1, vcpus: int = 1,
               cpu_level: tuple[str, str] | None = None) -> list[Check]:
    """`slots` and `vcpus`: the daemon's --slots and the largest VM it will run (cores.py);
    `cpu_level`: a challenge's name and the level it asks for, if it does."""
    checks = [_qemu()]
    conn = None
    try:
        conn = domain.connect(site.uri)
        checks.append(Check("libvirt", True, f"{site.uri} (libvirt {_version(conn.getLibVersion())})"))
        checks.append(_cpu(site, conn, cpu_level))
    except VmjudgeError as exc:
        checks.append(Check("libvirt", False, str(exc)))
    if site.accel == "kvm" and not os.access("/dev/kvm", os.R_OK | os.W_OK):
        checks.append(Check("kvm", False, "accel is kvm but /dev/kvm is missing or not usable: "
                            "enable virtualisation or set accel = \"tcg\" in site.toml."))
    checks.append(_home(site))
    cores_check, cores = _cores(site, slots, vcpus, conn)
    checks.append(cores_check)
    image_check, image = _image(None, find_image)
    checks.append(image_check)
    if conn is not None and image is not None and cores is not None and all(c.ok for c in checks):
        seen: dict[str, confinement.Observed | str] = {}
        checks.append(_boot(site, conn, image, cores, seen))
        if checks[-1].ok:
            checks += _confinement(site, seen.get("qemu", "the test VM was never seen running"))
    else:
        checks.append(Check("accel", False, "the test boot was not tried: fix the checks above first."))
    if conn is not None:
        conn.close()
    return checks + gpu_checks(site.gpu)


def _confinement(site: Site, seen: confinement.Observed | str) -> list[Check]:
    if isinstance(seen, confinement.Observed):
        return confinement.checks(site, seen, site.accel)
    trial = site.profile == "trial"  # unproven is what production refuses, and trial warns of
    if not is_local(site.uri):
        return [Check("confined", trial, f"libvirt at {site.uri} runs its qemu on another machine, whose processes "
                      "cannot be read from here: run `vmjudge doctor` on that machine.", warn=trial)]
    return [Check("confined", trial, f"the test VM's qemu process could not be read ({seen}).", warn=trial)]


def gpu_checks(gpu: GpuSite) -> list[Check]:
    """One line per configured GPU, from sysfs alone: the card is only proven in a VM by a
    GPU stage, but everything the host must do first can be read and named here."""
    checks = []
    for address in gpu.devices:
        reading = gpu_preflight.read_gpu(gpu, address)
        found = gpu_preflight.problems(gpu, reading)
        detail = " ".join(found) if found else gpu_preflight.describe(reading)
        checks.append(Check(f"gpu {address}", not found, detail))
    return checks


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0]


def _version(n: int) -> str:
    return f"{n // 1000000}.{n // 1000 % 1000}.{n % 1000}"


def as_json(checks: list[Check]) -> list[dict]:
    return [asdict(c) for c in checks]
