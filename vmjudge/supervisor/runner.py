"""Run one Job in one VM: write its CD, start the domain, read the channel, clean up.

The host is the last word on every limit: the guest must say hello within the boot
timeout, must never fall silent longer than the silence timeout (the agent sends a tick
every couple of seconds while a command runs), and the whole run has a hard deadline after
which the domain is destroyed. Whatever happens, the domain is gone and the files this
module made are removed when run_job returns or raises.
"""

from __future__ import annotations

import logging
import os
import secrets
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import libvirt

from ..config import Site
from ..errors import Cancelled, InfrastructureError
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
    """Host-side limits for one run; None takes the site's value or the job's own budget.

    `stage_cap` is the entry's own time limit for all its commands together, counted from
    the guest's hello: passing it ends the run as the entry's fault (JobRun.capped), while
    passing `deadline` (boot included) is the infrastructure's.
    """

    boot_timeout: float | None = None
    silence_timeout: float | None = None
    deadline: float | None = None
    stage_cap: float | None = None


@dataclass
class JobRun:
    domain: str
    transcript: Transcript
    iso_sha256: str
    boot_seconds: float  # start to the hello frame
    total_seconds: float
    ended: str = "bye"  # bye | stopped (the host's should_stop said so) | capped (stage_cap passed)


# Looks at the transcript after each batch of frames; True ends the run at once.
StopRule = Callable[[Transcript], bool]


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
            limits: Limits = Limits(), should_stop: StopRule | None = None, keep_iso: Path | None = None,
            cancel: threading.Event | None = None) -> JobRun:
    boot_timeout = limits.boot_timeout or site.boot_timeout
    silence_timeout = limits.silence_timeout or site.silence_timeout
    budget = limits.deadline or (boot_timeout + min(job.time_budget(), limits.stage_cap or float("inf"))
                                 + POWEROFF_GRACE)
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
        stream = FrameStream(nonce, limits=job.host_limits(), allow_raw=job.raw_copy is not None)
        reading = _Reading(domain, reader, stream, started, console_log, boot_timeout, silence_timeout, budget,
                           limits.stage_cap, should_stop, cancel)
        ended = reading.until_bye()
        transcript = stream.transcript
        if ended == "bye" and not domain.wait_stopped(POWEROFF_GRACE):
            log.warning("domain %s did not power off after its last frame; destroying it", name)
        if transcript.agent_error is not None:
            raise InfrastructureError("agent-error", f"the guest agent could not carry out the job: "
                                      f"{transcript.agent_error}")
        return JobRun(domain=name, transcript=transcript, iso_sha256=iso_sha, boot_seconds=reading.boot_seconds,
                      total_seconds=time.monotonic() - started, ended=ended)
    finally:
        try:
            if domain is not None:
                domain.destroy()
        finally:  # a domain libvirt would not destroy still leaves no pty or file of ours open
            if reader is not None:
                reader.close()
            if keep_iso is not None and iso.exists():
                os.replace(iso, keep_iso)
            iso.unlink(missing_ok=True)


@dataclass
class _Reading:
    """The host's read loop for one run, with every host-side limit checked on each pass."""

    domain: Domain
    reader: ChannelReader
    stream: FrameStream
    started: float
    console_log: Path
    boot_timeout: float
    silence_timeout: float
    budget: float
    stage_cap: float | None = None
    should_stop: StopRule | None = None
    cancel: threading.Event | None = None
    boot_seconds: float = 0.0

    def until_bye(self) -> str:
        transcript = self.stream.transcript
        last_frame = self.started
        while not transcript.finished:
            if self.cancel is not None and self.cancel.is_set():
                raise Cancelled("the daemon is stopping")
            now = time.monotonic()
            self._check_limits(now, last_frame)
            if self.stage_cap is not None and transcript.hello is not None \
                    and now - (self.started + self.boot_seconds) >= self.stage_cap:
                return "capped"
            try:
                data = self.reader.read(min(POLL, self.budget - (now - self.started)))
            except ChannelClosed:
                data = b""
                if not self.domain.wait_stopped(CLOSE_GRACE):
                    raise InfrastructureError("channel-broken", "the data channel closed while the VM still ran.")
            if data:
                had_hello = transcript.hello is not None
                if self.stream.feed(data):
                    last_frame = time.monotonic()
                    if not had_hello and transcript.hello is not None:
                        self.boot_seconds = last_frame - self.started
                    if self.should_stop is not None and self.should_stop(transcript):
                        return "stopped"
            elif not self.domain.is_active():
                raise InfrastructureError("guest-stopped", "the VM stopped before the guest agent finished "
                                          f"(a crash, a kernel panic or a reboot; console log: {self.console_log}).")
        return "bye"

    def _check_limits(self, now: float, last_frame: float) -> None:
        transcript = self.stream.transcript
        if now - self.started >= self.budget:
            raise InfrastructureError("guest-deadline", f"the VM ran past its host deadline of {self.budget:.0f} s "
                                      f"and was destroyed (console log: {self.console_log}).")
        if transcript.hello is None and now - self.started >= self.boot_timeout:
            raise InfrastructureError("guest-no-hello", f"the guest did not report within {self.boot_timeout:.0f} s "
                                      f"of starting; it may not have booted (console log: {self.console_log}).")
        if transcript.hello is not None and now - last_frame >= self.silence_timeout:
            raise InfrastructureError("channel-silent", f"the data channel was silent for {self.silence_timeout:.0f} s;"
                                      f" the guest agent has stopped (console log: {self.console_log}).")
