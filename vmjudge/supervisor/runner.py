"""Run one Job in one VM: write its CD, start the domain, read the channel, clean up.

The host is the last word on every limit: the guest must say hello within the boot
timeout, must never fall silent longer than the silence timeout (the agent sends a tick
every couple of seconds while a command runs), and the whole run has a hard deadline after
which the domain is destroyed. Whatever happens, the domain is gone and the files this
module made are removed when run_job returns or raises.
"""

from __future__ import annotations

import logging
import secrets
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import libvirt

from ..config import Site
from ..errors import InfrastructureError
from ..images.image import GuestImage, sha256_file
from ..images.iso import write_iso
from .channel import ChannelClosed, ChannelReader, FrameStream, Transcript
from .job import Job
from .vm import DOMAIN_PREFIX, Domain, DomainSpec, domain_xml

log = logging.getLogger(__name__)

POWEROFF_GRACE = 30.0
POLL = 0.5
# A pty closes a moment before libvirt reports the domain stopped.
CLOSE_GRACE = 5.0


@dataclass(frozen=True)
class Limits:
    """Host-side limits for one run; None takes the site's value or the job's own budget."""

    boot_timeout: float | None = None
    silence_timeout: float | None = None
    deadline: float | None = None


@dataclass
class JobRun:
    domain: str
    transcript: Transcript
    iso_sha256: str
    boot_seconds: float  # start to the hello frame
    total_seconds: float


def domain_name(label: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in label)[:40]
    return f"{DOMAIN_PREFIX}{safe}-{secrets.token_hex(4)}"


def make_blank_disk(path: Path, size_mib: int) -> None:
    _qemu_img(["create", "-q", "-f", "qcow2", str(path), f"{size_mib}M"])


def make_overlay(path: Path, backing: Path) -> None:
    """A throw-away disk whose reads fall through to `backing` and whose writes stay here."""
    _qemu_img(["create", "-q", "-f", "qcow2", "-b", str(Path(backing).resolve()), "-F", "qcow2", str(path)])


def _qemu_img(args: list[str]) -> None:
    try:
        proc = subprocess.run(["qemu-img", *args], capture_output=True, text=True)
    except FileNotFoundError:
        raise InfrastructureError("host-tools", "qemu-img is not installed: run `make setup` or "
                                  "`apt-get install qemu-utils`.")
    if proc.returncode != 0:
        raise InfrastructureError("host-disk", f"qemu-img {args[0]} failed: {proc.stderr.strip()}")


def run_job(conn: libvirt.virConnect, site: Site, image: GuestImage, job: Job, *, home_disk: Path,
            workdir: Path, console_log: Path, vcpus: int = 2, memory_mib: int = 2048, label: str = "job",
            limits: Limits = Limits()) -> JobRun:
    boot_timeout = limits.boot_timeout or site.boot_timeout
    silence_timeout = limits.silence_timeout or site.silence_timeout
    budget = limits.deadline or (boot_timeout + job.time_budget() + POWEROFF_GRACE)
    nonce = secrets.token_hex(16)
    name = domain_name(label)
    iso = Path(workdir) / f"{name}.iso"
    write_iso(iso, {**job.media, "job.json": job.job_json(nonce)})
    reader: ChannelReader | None = None
    domain: Domain | None = None
    try:
        iso_sha = sha256_file(iso)
        spec = DomainSpec(name=name, kernel=image.kernel, initrd=image.initrd, root=image.root,
                          home=Path(home_disk).resolve(), cdrom=iso, console_log=Path(console_log).resolve(),
                          accel=site.accel, vcpus=vcpus, memory_mib=memory_mib, channel=site.channel)
        domain = Domain.start_paused(conn, domain_xml(spec))
        reader = ChannelReader(domain.channel_pty(site.channel))
        started = time.monotonic()
        domain.resume()
        stream = FrameStream(nonce)
        boot_seconds = _read_until_bye(domain, reader, stream, started, boot_timeout, silence_timeout,
                                       budget, console_log)
        transcript = stream.transcript
        if not domain.wait_stopped(POWEROFF_GRACE):
            log.warning("domain %s did not power off after its last frame; destroying it", name)
        if transcript.agent_error is not None:
            raise InfrastructureError("agent-error", f"the guest agent could not carry out the job: "
                                      f"{transcript.agent_error}")
        return JobRun(domain=name, transcript=transcript, iso_sha256=iso_sha, boot_seconds=boot_seconds,
                      total_seconds=time.monotonic() - started)
    finally:
        if domain is not None:
            domain.destroy()
        if reader is not None:
            reader.close()
        iso.unlink(missing_ok=True)


def _read_until_bye(domain: Domain, reader: ChannelReader, stream: FrameStream, started: float,
                    boot_timeout: float, silence_timeout: float, budget: float, console_log: Path) -> float:
    transcript = stream.transcript
    last_frame = started
    boot_seconds = 0.0
    while not transcript.finished:
        now = time.monotonic()
        if now - started >= budget:
            raise InfrastructureError("guest-deadline", f"the VM ran past its host deadline of {budget:.0f} s "
                                      f"and was destroyed (console log: {console_log}).")
        if transcript.hello is None and now - started >= boot_timeout:
            raise InfrastructureError("guest-no-hello", f"the guest did not report within {boot_timeout:.0f} s of "
                                      f"starting; it may not have booted (console log: {console_log}).")
        if transcript.hello is not None and now - last_frame >= silence_timeout:
            raise InfrastructureError("channel-silent", f"the data channel was silent for {silence_timeout:.0f} s; "
                                      f"the guest agent has stopped (console log: {console_log}).")
        try:
            data = reader.read(min(POLL, budget - (now - started)))
        except ChannelClosed:
            data = b""
            if not domain.wait_stopped(CLOSE_GRACE):
                raise InfrastructureError("channel-broken", "the data channel closed while the VM still ran.")
        if data:
            had_hello = transcript.hello is not None
            if stream.feed(data):
                last_frame = time.monotonic()
                if not had_hello and transcript.hello is not None:
                    boot_seconds = last_frame - started
        elif not domain.is_active():
            raise InfrastructureError("guest-stopped", "the VM stopped before the guest agent finished "
                                      f"(a crash, a kernel panic or a reboot; console log: {console_log}).")
    return boot_seconds
