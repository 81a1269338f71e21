"""The host's read loop for one run, with every host-side limit, and what a run gives back.

Kept apart from runner.py (libvirt) because the replica ISO runs the same loop inside the
participant's machine: there the "domain" is the agent's local process and the "reader" a
pipe, and the loop, the limits and the stop rules must be the judge's very own.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..config import Site
from ..errors import Cancelled, EntryError, GpuFault, InfrastructureError
from .channel import ChannelClosed, FrameStream, Transcript
from .job import Job

POLL = 0.5
# A pty closes a moment before libvirt reports the domain stopped.
CLOSE_GRACE = 5.0
# Seconds a domain libvirt calls stopped, while its data channel stays open, before the run is ended as
# stopped: a libvirtd that restarts reports a running domain as missing, or without state, until it has
# reconnected to qemu (a loaded host's libvirtd took longer than 5 s in the full run of 2026-12-05). A qemu
# that has really exited closes the channel's pty, and that ends the run at once.
STOPPED_GRACE = 60.0


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


# No limit of the run's own: the site's and the job's apply (the default argument of the runners).
DEFAULT_LIMITS = Limits()


# How long a guest has to power off after its last frame before the host destroys it.
POWEROFF_GRACE = 30.0


def host_timeouts(site: Site, limits: Limits, job: Job) -> tuple[float, float, float]:
    """(boot, silence, deadline) in seconds: a stage's own limits, else site.toml's [libvirt];
    the deadline, unless given, is the boot limit plus what the commands may take (capped by
    the stage's cap) plus the power-off grace, after which the host destroys the VM."""
    boot = limits.boot_timeout or site.boot_timeout
    silence = limits.silence_timeout or site.silence_timeout
    deadline = limits.deadline or (boot + min(job.time_budget(), limits.stage_cap or float("inf")) + POWEROFF_GRACE)
    return boot, silence, deadline


@dataclass
class JobRun:
    domain: str
    transcript: Transcript
    iso_sha256: str
    boot_seconds: float  # start to the hello frame
    total_seconds: float
    ended: str = "bye"  # bye | stopped (the watch's on_end said so) | capped (stage_cap passed)
    gpu: dict[str, str] | None = None  # the GPU lent to the VM: its host address and vendor:device ids
    hardware: dict[str, Any] | None = None  # what it ran on (vm/hardware.py); None in the replica
    cpu_seconds: float | None = None  # qemu's CPU time for the VM, from libvirt; None in the replica
    start: dict[str, Any] | None = None  # {"mode": "warm" | "cold", and how or why} (vm/warm.py); None in the replica
    data_disks: dict[str, str] | None = None  # each record set's CD directory: its data disk's key (Job.data)


class Watched(Protocol):
    """What the read loop asks of what runs the agent: a libvirt domain (domain.Domain), or the replica's
    agent process (replica/local.py)."""

    def is_active(self) -> bool: ...

    def wait_stopped(self, seconds: float) -> bool: ...


@dataclass
class Reading:
    """The host's read loop for one run, with every host-side limit checked on each pass."""

    domain: Watched
    reader: Any  # read(timeout) -> bytes, ChannelClosed at the end
    stream: FrameStream
    started: float
    console_log: Path
    boot_timeout: float
    silence_timeout: float
    budget: float
    stage_cap: float | None = None
    cancel: threading.Event | None = None
    boot_seconds: float = 0.0
    stopped_grace: float = STOPPED_GRACE

    def until_bye(self) -> str:
        transcript = self.stream.transcript
        last_frame = self.started
        inactive_since: float | None = None  # when libvirt began to call the domain stopped, its channel open
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
            except ChannelClosed as exc:
                if not self.domain.wait_stopped(CLOSE_GRACE):
                    raise InfrastructureError("channel-broken",
                                              "the data channel closed while the VM still ran.") from exc
                raise self._stopped() from None
            if data:
                inactive_since = None
                had_hello = transcript.hello is not None
                if self.stream.feed(data):
                    last_frame = time.monotonic()
                    if not had_hello and transcript.hello is not None:
                        self.boot_seconds = last_frame - self.started
                    if transcript.stopped:
                        return "stopped"
            elif self.domain.is_active():
                inactive_since = None
            elif inactive_since is None:
                inactive_since = now
            elif now - inactive_since >= self.stopped_grace:
                raise self._stopped()
        return "bye"

    def _stopped(self) -> InfrastructureError:
        return InfrastructureError("guest-stopped", "the VM stopped before the guest agent finished (a crash, a "
                                   f"kernel panic or a reboot; console log: {self.console_log}).")

    def _check_limits(self, now: float, last_frame: float) -> None:
        transcript = self.stream.transcript
        if now - self.started >= self.budget:
            raise InfrastructureError("guest-deadline", f"the VM ran past its host deadline of {self.budget:.0f} s "
                                      f"and was destroyed (console log: {self.console_log}).")
        if transcript.hello is None and now - self.started >= self.boot_timeout:
            raise InfrastructureError("guest-no-hello", f"the guest did not report within {self.boot_timeout:.0f} s "
                                      f"of starting; it may not have booted (console log: {self.console_log}).")
        if transcript.hello is not None and now - last_frame >= self.silence_timeout:
            raise InfrastructureError("channel-silent", f"the data channel was silent for {self.silence_timeout:.0f} s"
                                      f"{_during(transcript)}; the guest agent has stopped (console log: "
                                      f"{self.console_log}).")


def _during(transcript: Transcript) -> str:
    """Which command was running when the channel fell silent, for the organiser (an infrastructure
    failure's message is never in the participant's view): the first thing to know of a stall."""
    running = transcript.commands[-1] if transcript.commands and transcript.commands[-1].status == "running" else None
    if running is None:
        return f" between commands ({len(transcript.commands)} ended)"
    return f" while command {running.index} ({running.name}) ran"



def check_agent_error(transcript: Transcript, gpu: str | None = None) -> None:
    """An agent that could not carry out the job: the entry's fault when the agent says so
    (the entry does not fit its home disk), the GPU's when the VM was lent one (`gpu`, its
    address) and the agent found it not working before any command ran, else the judge's."""
    if transcript.agent_error is None:
        return
    if transcript.entry_fault is not None:
        raise EntryError(transcript.entry_fault, f"The entry could not be installed: {transcript.agent_error}.")
    if transcript.gpu_fault and gpu is not None:
        raise GpuFault("gpu-guest", f"the GPU {gpu} did not work in the VM: {transcript.agent_error}", gpu)
    raise InfrastructureError("agent-error", f"the guest agent could not carry out the job: "
                              f"{transcript.agent_error}")
