"""The bookkeeping of one stage attempt: sorting what went wrong, and writing it down.

A failure is the entry's verdict only when the entry caused it (EntryError, or a stage's
own outcome); everything else (libvirt, the host's disk, a missing image, a bug of ours) is
recorded as the infrastructure's, and the queue's retry policy decides what comes next.
Writes wait out a queue that cannot be written rather than lose a result. The replica ISO
records its stages 1 and 2 through record_outcome too, so its report is the judge's.
"""

from __future__ import annotations

import errno
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from ..config import Site
from ..errors import Cancelled, ChallengeError, EntryError, InfrastructureError, VmjudgeError
from ..pipeline import next_stage
from ..queue.connection import QueueUnavailable
from ..queue.db import Queue
from ..queue.rows import StageRun
from ..reports.report import write_html
from ..stages.context import StageOutcome

log = logging.getLogger(__name__)

OUTCOME = {"failed": "failed", "dry-run": "dry-run", "scored": "scored"}
T = TypeVar("T")


class Recorder:
    """Writes to the queue, waiting out a queue that cannot be written (its disk full, its
    server restarting) rather than dropping a result or letting the daemon die: once it can
    be written again, the result lands (unless another host took the stage meanwhile). If
    the daemon stops meanwhile, Cancelled leaves the stage marked running for the next
    daemon to run again."""

    RETRY = 5.0

    def __init__(self, cancel: threading.Event | None):
        self.cancel = cancel or threading.Event()

    def __call__(self, what: str, write: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        warned = False
        while True:
            try:
                return write(*args, **kwargs)
            except QueueUnavailable as exc:
                if not warned:
                    log.error("cannot record %s in the queue (%s); retrying every %.0f s", what, exc, self.RETRY)
                    warned = True
            if self.cancel.wait(self.RETRY):
                raise Cancelled("the daemon is stopping")


def attempt(queue: Queue, run: StageRun, host: str, record: Recorder,
            stage_body: Callable[[], StageOutcome]) -> StageOutcome | None:
    """Run `stage_body` once: its outcome, or None when what stopped it was recorded as not
    the entry's doing (or the daemon is stopping)."""
    entry_id, stage = run.entry_id, run.stage
    park = False  # the challenge's own fault (ChallengeError): held for the organiser at once, never retried
    try:
        return stage_body()
    except Cancelled:
        log.info("entry %d %s attempt %d: abandoned, the daemon is stopping", entry_id, stage, run.attempt)
        record(f"entry {entry_id}'s abandoned {stage}", queue.cancel_stage, run)
        return None
    except EntryError as exc:  # what the entry is or did, found by the machinery: its verdict, not a retry
        return StageOutcome("failed", f"{exc} Entry not scored.", reason=exc.reason, manifest={"stage": stage})
    except InfrastructureError as exc:
        log.warning("entry %d %s attempt %d: %s", entry_id, stage, run.attempt, exc)
        reason, message, park = exc.reason, str(exc), isinstance(exc, ChallengeError)
    except VmjudgeError as exc:  # image missing, challenge moved: the organiser's to fix, not the entry's
        reason, message = "setup-problem", str(exc)
    except OSError as exc:  # the host's disk, not the entry: e.g. no space left for the results
        reason = "host-disk-full" if exc.errno == errno.ENOSPC else "host-io"
        message = f"the host could not write the stage's files: {exc}"
    except Exception as exc:  # a bug of ours must not stop the daemon, nor be charged to the entry
        log.exception("entry %d %s attempt %d failed inside vmjudge", entry_id, stage, run.attempt)
        reason, message = "internal-error", f"{type(exc).__name__}: {exc}"
    record(f"entry {entry_id}'s {stage} failure", queue.infra_failure, run, reason, message,
           {"stage": stage, "attempt": run.attempt, "host": host}, park=park)
    return None


def record_outcome(queue: Queue, run: StageRun, outcome: StageOutcome, record: Recorder | None = None) -> bool:
    """Move the entry on after a stage the entry (not the infrastructure) decided. True when
    the evaluation has ended (its report is final)."""
    record = record or Recorder(None)
    entry_id, stage = run.entry_id, run.stage
    if outcome.status == "passed":
        record(f"entry {entry_id}'s {stage} result", queue.finish_stage, run, "passed", outcome.message,
               outcome.manifest, next_stage=next_stage(stage), exam=outcome.exam,
               results_sha256=outcome.results_sha256, figures=outcome.figures)
        return False
    record(f"entry {entry_id}'s {stage} result", queue.finish_stage, run, outcome.status, outcome.message,
           outcome.manifest, reason=outcome.reason, outcome=OUTCOME[outcome.status], scores=outcome.scores,
           exam=outcome.exam, scoring=outcome.scoring, figures=outcome.figures)
    return True


def write_report(queue: Queue, site: Site, entry_id: int) -> None:
    """The HTML copy of the report is a convenience (`show` renders it from the queue at any
    time): failing to write it is logged, never fatal."""
    try:
        write_html(queue, site, entry_id)
    except OSError as exc:
        log.error("entry %d: could not write its HTML report (%s); `vmjudge show` still has it", entry_id, exc)
