"""Run one Job in one VM: write its CD, start the domain, read the channel, clean up.

The host is the last word on every limit: the guest must say hello within the boot
timeout, must never fall silent longer than the silence timeout (the agent sends a tick
every couple of seconds while a command runs), and the whole run has a hard deadline after
which the domain is destroyed. Whatever happens, the domain is gone and the files this
module made are removed when run_job returns or raises.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import libvirt

from ..config import Site
from ..errors import GpuFault, InfrastructureError
from ..files import sha256_file
from ..images.data_disk import DataDisks
from ..images.image import GuestImage
from ..images.iso import write_iso
from . import warm
from .channel import FrameStream, Watch
from .domain import DOMAIN_PREFIX, Domain
from .domain_xml import DomainSpec, domain_xml, hard_limit_kib
from .gpu_preflight import lendable_card
from .hardware import below_level, fingerprint, guest_cpu
from .job import JOB_FILE, Job
from .pinning import SlotCores
from .pty_reader import ChannelReader
from .reading import DEFAULT_LIMITS, POWEROFF_GRACE, JobRun, Limits, Reading, check_agent_error, host_timeouts
from .warm_rules import why_cold

log = logging.getLogger(__name__)

# A VM's disks and CD hold the entry's code and the test records, and their paths show in
# qemu's command line: root's alone. libvirt (dynamic_ownership, Debian's default) gives each
# to its qemu user while the domain runs, the backing file of an overlay included, and gives
# it back after.
PRIVATE_FILE = 0o600


def domain_name(label: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in label)[:40]
    return f"{DOMAIN_PREFIX}{safe}-{secrets.token_hex(4)}"


def make_blank_disk(path: Path, size_mib: int) -> None:
    _qemu_img(["create", "-q", "-f", "qcow2", str(path), f"{size_mib}M"])
    os.chmod(path, PRIVATE_FILE)


def make_tmp_disk(path: Path, size_mib: int) -> None:
    """[container] tmp: an empty ext4 file system in a sparse raw file of `size_mib` (no journal: it lives
    for one run; its inode tables taken as zeros, as holes read), made here, so that the guest spends
    nothing on it. The file's size is the host's bound on what the cases write to /tmp, and the host's
    disk holds only what they write (#57: Grand Challenge gives 125 GB, which a host could not reserve for
    every stage at once). A host whose disk fills meanwhile pauses the VM (domain_xml.py's error policy):
    the judge's failure, run again, never the entry's; so a host without room for this disk's whole size
    refuses the stage before it starts (other stages' /tmp disks may still fill it meanwhile)."""
    free = shutil.disk_usage(path.parent).free
    if free < size_mib << 20:
        raise InfrastructureError("host-disk-full", f"the cases' /tmp disk of {size_mib} MiB does not fit in the "
                                  f"{free >> 20} MiB free under {path.parent}: free some space, or lower "
                                  "[container] tmp.")
    with open(path, "wb") as f:
        os.fchmod(f.fileno(), PRIVATE_FILE)
        f.truncate(size_mib << 20)
    try:
        proc = subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", "-b", "4096", "-O", "^has_journal",
                               "-E", "lazy_itable_init=1,assume_storage_prezeroed=1,nodiscard", str(path)],
                              capture_output=True, text=True)
    except FileNotFoundError:
        raise InfrastructureError("host-tools", "mkfs.ext4 is not installed: run `make setup` or "
                                  "`apt-get install e2fsprogs`.") from None
    if proc.returncode != 0:
        raise InfrastructureError("host-disk", f"mkfs.ext4 of the cases' /tmp disk failed: {proc.stderr.strip()}")


def make_overlay(path: Path, backing: Path) -> None:
    """A throw-away disk whose reads fall through to `backing` and whose writes stay here."""
    _qemu_img(["create", "-q", "-f", "qcow2", "-b", str(Path(backing).resolve()), "-F", "qcow2", str(path)])
    os.chmod(path, PRIVATE_FILE)


def _qemu_img(args: list[str]) -> None:
    try:
        proc = subprocess.run(["qemu-img", *args], capture_output=True, text=True)
    except FileNotFoundError:
        raise InfrastructureError("host-tools", "qemu-img is not installed: run `make setup` or "
                                  "`apt-get install qemu-utils`.") from None
    if proc.returncode != 0:
        raise InfrastructureError("host-disk", f"qemu-img {args[0]} failed: {proc.stderr.strip()}")


def run_job(conn: libvirt.virConnect, site: Site, image: GuestImage, job: Job, *, home_disk: Path,
            workdir: Path, console_log: Path, vcpus: int = 2, memory_mib: int = 2048, label: str = "job",
            limits: Limits = DEFAULT_LIMITS, watch: Watch | None = None, keep_iso: Path | None = None,
            cancel: threading.Event | None = None, gpu: str | None = None, cores: SlotCores | None = None,
            on_start: Callable[[Domain], None] | None = None, disks: DataDisks | None = None) -> JobRun:
    """`gpu`: the host PCI address of a GPU slot's card, passed through to this VM. `cores`: its
    slot's host cores, which the VM is pinned to (the daemon's, evaluate's and the doctor's VMs
    always are; None leaves it unpinned, for tests and benchmarks that want it so). The VM is
    restored from a warm state when it can be (warm.py), else booted: JobRun.start says which.
    A container entry's root (job.entry_root) is given to it as a read-only disk either way.
    `on_start` is called with the domain once it runs, before its hello is read: what the host reads
    of a running qemu (the doctor's confinement checks, the tests') is read there. `disks`: where the
    record sets' disks are found or made (the home's own, without an object store, by default)."""
    # Checked again just before the VM is given it; the manifest records what was lent.
    lent = {"address": gpu, "ids": lendable_card(site.gpu, gpu).ids} if gpu is not None else None
    # Read now, while `conn` is known to answer: libvirtd may restart while the VM runs, and the
    # domain then carries on through a connection of its own.
    hardware = fingerprint(conn, site, vcpus, memory_mib)
    nonce = secrets.token_hex(16)
    name = domain_name(label)
    iso = Path(workdir) / f"{name}.iso"
    entry_root = Path(job.entry_root).resolve() if job.entry_root is not None else None
    tmp_disk = (Path(workdir) / f"{name}-tmp.img").resolve() if job.tmp_mib else None
    held = contextlib.ExitStack()
    try:
        # Each record set's disk, made once for every VM (images/data_disk.py), held until this VM is gone.
        disks = disks or DataDisks(site.layout.data_disks)
        data = [held.enter_context(disks.held(d, job.data_files(d))) for d in job.data]
        write_iso(iso, {**job.cd_media(), JOB_FILE: job.job_json(nonce, gpu=gpu is not None,
                                                                 seed=secrets.token_hex(32), data_disks=True)},
                  private=frozenset({JOB_FILE}), directories=job.data)
        os.chmod(iso, PRIVATE_FILE)  # the job's own files: libvirt lends it to its qemu user for the run
    except BaseException:
        held.close()
        raise
    try:
        if tmp_disk is not None and job.tmp_mib:
            make_tmp_disk(tmp_disk, job.tmp_mib)
        iso_sha = sha256_file(iso)
        # The image's files by their real paths: homes that link one images directory share its
        # warm states (Layout.warm), whose XML names these files; by a home's own link, every home
        # made the shared states again (8-10 s a stage under TCG) for the next one to remake.
        spec = DomainSpec(name=name, kernel=image.kernel.resolve(), initrd=image.initrd.resolve(),
                          root=image.root.resolve(), home=Path(home_disk).resolve(), cdrom=iso,
                          console_log=Path(console_log).resolve(),
                          accel=site.accel, vcpus=vcpus, memory_mib=memory_mib, channel=site.channel, gpu=gpu,
                          cputune=cores.tune(vcpus) if cores is not None else None, entry_root=entry_root,
                          tmp_disk=tmp_disk, cpu=site.cpu, data_disks=tuple(d.path for d in data))
        run = _Run(conn, site, job, nonce, limits, watch, cancel, console_log, on_start,
                   {d.cd_dir: d.key for d in data})
        why = why_cold(site, gpu)
        if why is None:
            warm_run = _warm(run, image, spec, lent, hardware, iso_sha)
            if isinstance(warm_run, JobRun):
                return warm_run
            log.warning("%s boots cold: %s", name, warm_run)
            why = warm_run
        return run.go(lambda: _start(conn, site.uri, domain_xml(spec), gpu, hard_limit_kib(spec)),
                      {"mode": "cold", "why": why}, lent, hardware, iso_sha)
    finally:
        if keep_iso is not None and iso.exists():
            os.replace(iso, keep_iso)
            os.chmod(keep_iso, 0o600)  # the domain is gone: an audit copy, test records and all
            give_back(keep_iso)  # a read-only disk too: libvirt left it to its qemu user
        iso.unlink(missing_ok=True)
        if tmp_disk is not None:
            tmp_disk.unlink(missing_ok=True)
        if entry_root is not None:
            give_back(entry_root)
        held.close()


def give_back(path: Path) -> None:
    """A read-only disk back to root once its domain is gone. libvirt gives its qemu user each
    disk for a run, and gives back the writable ones after; a read-only one it leaves to the qemu
    user for good (another VM might share it). An entry's root is the participant's image: between
    its runs no VM's qemu may read it."""
    try:
        os.chown(path, 0, 0)
    except OSError as exc:
        log.warning("could not give %s back to root after its run: %s", path, exc)


def _warm(run: _Run, image: GuestImage, spec: DomainSpec, lent: dict | None, hardware: dict,
          iso_sha: str) -> JobRun | str:
    """The run restored from one of this shape's saved VMs, or why it could not be (and then
    nothing of the entry has run: the caller boots it cold)."""
    conn, site = run.conn, run.site
    with contextlib.ExitStack() as held:
        try:
            seat = held.enter_context(warm.seat(site, image, warm.Shape(site.accel, spec.vcpus, spec.memory_mib)))
            if seat is None:
                return f"every one of the {warm.SEATS} warm states of this shape is in use"
            state = seat.ready(conn, site, spec)
        except warm.WarmFailed as exc:
            return str(exc)
        except (OSError, libvirt.libvirtError) as exc:  # its files, or libvirt's versions: nothing has run
            return f"the warm state could not be used: {exc}"
        try:
            return run.go(lambda: seat.restore(conn, spec), {"mode": "warm", "seat": seat.number, **state},
                          lent, hardware, iso_sha)
        except warm.WarmFailed as exc:  # before the agent had its job: nothing of the entry ran
            seat.discard()  # restored, and yet no hello: made again for the next run
            return str(exc)
    raise AssertionError("unreachable: the ExitStack above suppresses nothing")


@dataclass
class _Run:
    """One job's VM from its start to its end, started cold or warm: the same reading, limits
    and clean-up either way."""

    conn: libvirt.virConnect
    site: Site
    job: Job
    nonce: str
    limits: Limits
    watch: Watch | None
    cancel: threading.Event | None
    console_log: Path
    on_start: Callable[[Domain], None] | None = None
    data_keys: dict[str, str] | None = None  # each record set's data disk (JobRun.data_disks)

    def go(self, start: Callable[[], Domain], how: dict[str, Any], lent: dict | None, hardware: dict,
           iso_sha: str) -> JobRun:
        """WarmFailed when a warm start (`how` says so) breaks off before the agent's hello."""
        is_warm = how["mode"] == "warm"
        boot_timeout, silence_timeout, budget = host_timeouts(self.site, self.limits, self.job)
        reader: ChannelReader | None = None
        domain: Domain | None = None
        stream = FrameStream(self.nonce, limits=self.job.host_limits(), allow_raw=self.job.raw_copy is not None,
                             watch=self.watch)
        try:
            started = time.monotonic()  # boot_seconds: from the domain's start or restore to the hello
            domain = start()
            reader = ChannelReader(domain.channel_pty(self.site.channel))
            domain.resume()
            if is_warm:
                reader.write(warm.wake_line())
                boot_timeout = min(boot_timeout, warm.HELLO_TIMEOUT)
            if self.on_start is not None:
                self.on_start(domain)
            reading = Reading(domain, reader, stream, started, self.console_log, boot_timeout, silence_timeout,
                              budget, self.limits.stage_cap, self.cancel)
            ended = reading.until_bye()
            cpu_seconds = domain.cpu_seconds()  # at once: after its bye the guest powers off
            transcript = stream.transcript
            if ended == "bye" and not domain.wait_stopped(POWEROFF_GRACE):
                log.warning("domain %s did not power off after its last frame; destroying it", domain.name)
            check_agent_error(transcript, lent["address"] if lent else None)
            ran_on = {**hardware, "guest_cpu": guest_cpu(self.site.guest_cpu.setting, transcript.hello)}
            return JobRun(domain=domain.name, transcript=transcript, iso_sha256=iso_sha,
                          boot_seconds=reading.boot_seconds, total_seconds=time.monotonic() - started, ended=ended,
                          gpu=lent, hardware=ran_on, cpu_seconds=cpu_seconds, start=how,
                          data_disks=self.data_keys or None)
        except InfrastructureError as exc:
            hello = stream.transcript.hello
            # No hello, or one without this job's nonce: the agent never read the job (its CD unseen).
            if is_warm and (hello is None or hello.get("nonce") != self.nonce):
                raise warm.WarmFailed(f"the warm start broke off before the agent had its job: {exc}") from None
            raise
        finally:
            try:
                if domain is not None:
                    domain.destroy()
            finally:  # a domain libvirt would not destroy still leaves no pty or file of ours open
                if reader is not None:
                    reader.close()


def _start(conn: libvirt.virConnect, uri: str, xml: str, gpu: str | None, limit_kib: int) -> Domain:
    """Started paused and its memory bounded before the guest runs. A VM that will not start with a
    GPU lent to it is the card's or its host's doing (its group not viable, a reset that failed,
    the card gone): the slot's fault, not libvirt's."""
    try:
        started = Domain.start_paused(conn, xml, uri)
    except InfrastructureError as exc:
        if gpu is None:
            raise
        raise GpuFault("gpu-start", f"the VM would not start with the GPU {gpu}: {exc}", gpu) from None
    try:
        started.bound_memory(limit_kib)
    except InfrastructureError:
        started.destroy()
        raise
    return started


@dataclass(frozen=True)
class VmRunner:
    """The judge's way to run a stage's jobs (stages.context.JobRunner): one libvirt VM per
    job, qcow2 home disks. The supervisor builds one per stage attempt; the stage never sees
    the connection.

    File modes here are libvirt's business, not private.py's: the home disk and its overlays
    keep qemu-img's mode, since libvirt's qemu user opens them (libvirt chowns a disk to that
    user while its domain runs, and the overlays' backing file, home.qcow2, is opened through
    them). The console log is made by virtlogd, as root, mode 0600.
    """

    conn: libvirt.virConnect
    site: Site
    image: GuestImage
    entry_id: int  # names the run directories and the domains; its files keep the console logs
    attempt: int
    vcpus: int
    memory_mib: int
    cancel: threading.Event | None = None
    gpu: str | None = None  # the GPU slot's card (its host PCI address), lent to every VM of the stage
    cores: SlotCores | None = None  # the slot's host cores, every VM of the stage pinned to them
    cpu_level: str | None = None  # the challenge's [vm] cpu_level: a guest below it is the infrastructure's failure
    disks: DataDisks | None = None  # the record sets' disks, with the object store's (run_job)

    def new_home(self, path: Path, size_mib: int) -> None:
        make_blank_disk(path, size_mib)

    def overlay(self, path: Path, backing: Path) -> None:
        make_overlay(path, backing)

    def run(self, stage: str, job: Job, home: Path, limits: Limits, watch: Watch | None) -> JobRun:
        files = self.site.layout.results_of(self.entry_id, make=True)
        console = files.console_log(stage, self.attempt)
        keep_iso = files.media(stage, self.attempt) if self.site.keep_media else None
        with self.site.layout.stage_run_dir(self.entry_id, stage) as rd:
            ran = run_job(self.conn, self.site, self.image, job, home_disk=home, workdir=rd.path,
                          console_log=console, vcpus=self.vcpus, memory_mib=self.memory_mib,
                          label=f"{self.site.domain_tag}-e{self.entry_id}-{stage}", limits=limits, watch=watch,
                          keep_iso=keep_iso, cancel=self.cancel, gpu=self.gpu, cores=self.cores, disks=self.disks)
        short = below_level((ran.hardware or {}).get("guest_cpu"), self.cpu_level) if self.cpu_level else None
        if short is not None:  # the gate (supervisor/cpu_gate.py) trusted libvirt's word; the guest says otherwise
            raise InfrastructureError("guest-cpu", short)
        return ran
