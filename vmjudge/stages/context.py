"""What every stage gets (the entry, its challenge, a way to run jobs) and gives back.

Stages never call libvirt themselves: they build a Job and hand it to `ctx.run`. In the
judge that boots one VM through the runner the supervisor built (vm.runner.VmRunner); on the replica ISO the
same stage code runs the same job with the agent inside the participant's booted replica
(vmjudge.replica.local). Home disks are the runner's business too: a qcow2 file for a VM,
a saved directory tree for the replica.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol

from .. import __version__
from ..config import Challenge, Site
from ..config.layout import EntryFiles
from ..images.image import GuestImage
from ..queue.rows import EntryRow, Scoring
from ..vm.channel import CommandResult, Watch
from ..vm.job import Job
from ..vm.reading import DEFAULT_LIMITS, JobRun, Limits
from .stage_log import StageLog

DRYRUN_MESSAGE = ("Dry run completed with no error. Remove the DRYRUN file from the entry and resubmit it if you "
                  "wish to receive a score for it.")
SMOKE_MESSAGE = ("Smoke test completed with no error: it ran on the public sample only and is not scored. Submit "
                 "it again without the smoke test option if you wish to receive a score for it.")
DRYRUN_LABEL_MESSAGE = ("Dry run completed with no error. Remove the label org.vmjudge.dryrun from the image and "
                        "resubmit it if you wish to receive a score for it.")


@dataclass
class StageOutcome:
    """A stage's verdict. status: passed | failed | dry-run | scored."""

    status: str
    message: str  # what the participant sees of this stage
    reason: str | None = None  # the entry's failure code when failed
    organiser_log: str = ""  # kept for organisers only (outputs the participant must not see)
    scores: dict[str, float | None] | None = None
    exam: dict[str, int] | None = None
    manifest: dict[str, Any] = field(default_factory=dict)
    results_sha256: str | None = None  # stage 3: its results, archived in the results store
    scoring: Scoring | None = None  # stage 4: the official scoring and what it used
    figures: dict[str, Any] | None = None  # what the VM stage's run used (figures.py), organisers' record


class JobRunner(Protocol):
    """How a stage's Job gets run, and how the entry's home is made and overlaid."""

    def new_home(self, path: Path, size_mib: int) -> None: ...

    def overlay(self, path: Path, backing: Path) -> None: ...

    def run(self, stage: str, job: Job, home: Path, limits: Limits, watch: Watch | None) -> JobRun: ...


@dataclass(frozen=True)
class StageContext:
    site: Site
    challenge: Challenge
    image: GuestImage | None  # None for stage 4, which runs on the host only
    entry: EntryRow
    attempt: int
    runner: JobRunner | None = None  # built by the supervisor (or the replica); None for stage 4
    cancel: threading.Event | None = None  # set when the daemon is stopping
    archived: str | None = None  # stage 4: the sha256 of the entry's archived stage-3 results
    # The judge's: a container entry's stage 1 asks for its end to be published as if its root had
    # been made (queue/publish.py). The replica, alone on the participant's machine with roots of
    # its own, has nothing to hide and nothing to wait for.
    publish_prep: bool = True

    @cached_property
    def files(self) -> EntryFiles:
        """The entry's files under HOME/results/ID, the directory made (and its mode set) once per
        stage rather than at every use: the quiz reads the submitted answers at every record."""
        return self.site.layout.results_of(self.entry.id, make=True)

    @property
    def results_dir(self) -> Path:
        return self.files.directory

    @property
    def entry_dir(self) -> Path:
        """The unpacked entry on the host (stage 1 makes it; later stages read submitted answers)."""
        return self.files.entry

    @property
    def home_disk(self) -> Path:
        return self.files.home_disk

    def run(self, stage: str, job: Job, home: Path, limits: Limits = DEFAULT_LIMITS,
            watch: Watch | None = None) -> JobRun:
        return self.jobs.run(stage, job, home, limits, watch)

    @property
    def jobs(self) -> JobRunner:
        """The runner of this stage's jobs; stage 4, on the host only, has none."""
        if self.runner is None:
            raise RuntimeError(f"entry {self.entry.id}'s stage has no job runner")
        return self.runner

    def manifest(self, stage: str, run: JobRun | None = None) -> dict[str, Any]:
        """Everything needed to trace a result to exactly what produced it."""
        if self.image is None:
            raise RuntimeError("stage 4 runs on the host: no image to trace")
        m: dict[str, Any] = {"stage": stage, "attempt": self.attempt, "entry_sha256": self.entry.archive_sha256,
                             "image": self.image.key, "image_sha256": dict(self.image.manifest["sha256"]),
                             "agent_version": self.image.manifest.get("agent_version"), "host": self.site.uri,
                             "accel": self.site.accel, "vmjudge_version": __version__}
        if run is not None:
            hello = run.transcript.hello or {}
            m.update({"domain": run.domain, "iso_sha256": run.iso_sha256, "boot_seconds": round(run.boot_seconds, 3),
                      "run_seconds": round(run.total_seconds, 3), "ended": run.ended,
                      "guest_agent": hello.get("agent"), "start": run.start})
            if run.data_disks:  # the record sets, as disks of their own: each one's content key
                m["data_disks"] = dict(run.data_disks)
            if run.gpu is not None or self.has_gpu_driver:
                # The card lent (address, ids) and what the agent found of it (driver version, name).
                m["gpu"] = {**(run.gpu or {}), "guest": hello.get("gpu")}
            if run.hardware is not None:
                found = (hello.get("gpu") or {}) if run.gpu is not None else {}
                gpu = " ".join(str(found[k]) for k in ("name", "driver") if found.get(k)) or None
                m["hardware"] = {**run.hardware, "gpu": gpu}
        return m

    def stage_log(self, stage: str) -> StageLog:
        """The stage's log, written as the output arrives, capped; the organisers' alone (0600):
        exam.log is what the entry printed on the test records."""
        return StageLog(self.files.stage_log(stage), self.challenge.limits.stage_output, gpu=self.has_gpu_driver)

    @property
    def has_gpu_driver(self) -> bool:
        """The image carries a GPU driver ([image] gpu): its stages say what GPU the guest found,
        none included (a CPU image's would only ever say it has no driver)."""
        return self.image is not None and "gpu" in self.image.manifest


def script_argv(script: str, *args: str) -> tuple[str, ...]:
    """The rule for running setup.sh and next.sh: directly when the entry made it executable
    (so its own #! line counts), otherwise with bash."""
    return ("sh", "-c", f'if [ -x ./{script} ]; then exec ./{script} "$@"; else exec bash ./{script} "$@"; fi',
            script, *args)


def output_text(cmd: CommandResult) -> str:
    """What a participant is shown of a command's output: its head and, when it printed more,
    how much was left out and its tail (where a traceback ends)."""
    text = bytes(cmd.output).decode("utf-8", "replace")
    if cmd.tail or cmd.omitted:
        text += f"\n[... {cmd.omitted} bytes of output not shown ...]\n" + bytes(cmd.tail).decode("utf-8", "replace")
    if cmd.host_capped:  # the guest sent more than the job allowed
        text += "\n[output truncated]"
    if cmd.errors or cmd.error_bytes:
        text += "\n" + warnings_text(cmd)
    return text


def warnings_text(cmd: CommandResult, limit: int | None = None) -> str:
    """What a command kept apart on stderr (a container run Grand Challenge's way), shown as its
    warnings: the head, at most `limit` characters of it, and how much was left out."""
    shown = bytes(cmd.errors).decode("utf-8", "replace")
    if limit is not None:
        shown = shown[:limit]
    left = cmd.error_bytes - len(shown.encode("utf-8", "replace"))
    return f"--- warnings (stderr, {cmd.error_bytes} bytes) ---\n{shown}" + \
        (f"\n[... {left} bytes of stderr not shown ...]" if left > 0 else "")
