"""The evaluation of one entry, stage by stage, as PhysioNet's `evaluate` script did it:

    1 prep   check the components, install the entry, run setup.sh     (VM)
    2 quiz   next.sh per training record must reproduce the submission  (VM)
      DRYRUN ends the evaluation here
    3 exam   next.sh per test record, silently, under the stage's cap   (VM)
    4 score  compare stage 3's results with the reference answers       (host)

A stage that fails ends the evaluation. Each stage is one VM boot and one row in the
queue, so the daemon can run stages of different entries side by side, and a stage that
the infrastructure (not the entry) broke is simply run again.
"""

from __future__ import annotations

import errno
import logging
import sqlite3
import threading
from typing import Any, Callable, TypeVar

from .config import load_challenge
from .errors import Cancelled, EntryError, ImageError, InfrastructureError, VmjudgeError
from .images.build import find_image
from .queue.db import Queue
from .queue.results import archived_results
from .queue.rows import EntryRow, StageRun
from .stages.context import StageContext, StageOutcome
from .stages.exam import stage as exam
from .stages.prep import stage as prep
from .stages.quiz import stage as quiz
from .stages.score import stage as score
from .config import Site
from .report import write_html

log = logging.getLogger(__name__)

STAGES: dict[str, Callable[[StageContext], StageOutcome]] = {
    "prep": prep.run, "quiz": quiz.run, "exam": exam.run, "score": score.run}
NEXT_STAGE = {"prep": "quiz", "quiz": "exam", "exam": "score"}
OUTCOME = {"failed": "failed", "dry-run": "dry-run", "scored": "scored"}
T = TypeVar("T")


def run_stage(queue: Queue, site: Site, entry: EntryRow, slot: int, cancel: threading.Event | None = None) -> None:
    """Run the entry's current stage once and record what came of it."""
    stage = str(entry.stage)
    record = Recorder(cancel)
    try:
        run = record(f"the start of entry {entry.id}'s {stage} stage", queue.start_stage, entry.id, stage,
                     site.uri, slot)
        outcome = _attempt(queue, site, entry, stage, run, cancel, record)
        if outcome is None:
            return
        record_outcome(queue, site, entry.id, run, stage, outcome, record)
    except Cancelled:
        # The daemon stopped while the queue could not be written: the stage is still marked
        # running, and the next daemon's recovery queues it again.
        log.warning("entry %d %s: left for the next daemon to run again", entry.id, stage)
        return
    log.info("entry %d %s: %s %s", entry.id, stage, outcome.status, outcome.reason or "")


def _attempt(queue: Queue, site: Site, entry: EntryRow, stage: str, run: StageRun, cancel: threading.Event | None,
             record: "Recorder") -> StageOutcome | None:
    """One attempt at the stage: its outcome, or None when it was recorded as not the entry's doing."""
    conn = None
    try:
        challenge = load_challenge(queue.challenge_dir(entry.challenge))
        image, found = None, None
        if stage == "score":  # on the host only, from the archived results: no image, no VM
            found = archived_results(queue, site.home, entry.id)
        else:
            try:
                image = find_image(site, challenge.image)
            except ImageError as exc:
                raise InfrastructureError("image-missing", str(exc))
            image.check()
            from .supervisor import vm  # here: the replica ISO imports this module without libvirt

            conn = vm.connect(site.uri)
        ctx = StageContext(site=site, challenge=challenge, image=image, conn=conn, entry=entry,
                           attempt=run.attempt, cancel=cancel, archived=found.sha256 if found else None)
        return STAGES[stage](ctx)
    except Cancelled:
        log.info("entry %d %s attempt %d: abandoned, the daemon is stopping", entry.id, stage, run.attempt)
        record(f"entry {entry.id}'s abandoned {stage}", queue.cancel_stage, run)
        return None
    except EntryError as exc:  # what the entry is or did, found by the machinery: its verdict, not a retry
        return StageOutcome("failed", f"{exc} Entry not scored.", reason=exc.reason, manifest={"stage": stage})
    except InfrastructureError as exc:
        log.warning("entry %d %s attempt %d: %s", entry.id, stage, run.attempt, exc)
        reason, message = exc.reason, str(exc)
    except VmjudgeError as exc:  # image missing, challenge moved: the organiser's to fix, not the entry's
        reason, message = "setup-problem", str(exc)
    except OSError as exc:  # the host's disk, not the entry: e.g. no space left for the results
        reason = "host-disk-full" if exc.errno == errno.ENOSPC else "host-io"
        message = f"the host could not write the stage's files: {exc}"
    except Exception as exc:  # a bug of ours must not stop the daemon, nor be charged to the entry
        log.exception("entry %d %s attempt %d failed inside vmjudge", entry.id, stage, run.attempt)
        reason, message = "internal-error", f"{type(exc).__name__}: {exc}"
    finally:
        if conn is not None:
            conn.close()
    record(f"entry {entry.id}'s {stage} failure", queue.infra_failure, run, reason, message,
           {"stage": stage, "attempt": run.attempt, "host": site.uri})
    return None


def record_outcome(queue: Queue, site: Site, entry_id: int, run: StageRun, stage: str, outcome: StageOutcome,
                   record: "Recorder | None" = None) -> None:
    """Move the entry on after a stage the entry (not the infrastructure) decided; the replica
    ISO records its stages 1 and 2 through here too, so its report is the judge's."""
    record = record or Recorder(None)
    if outcome.status == "passed":
        record(f"entry {entry_id}'s {stage} result", queue.finish_stage, run, "passed", outcome.message,
               outcome.manifest, next_stage=NEXT_STAGE[stage], exam=outcome.exam,
               results_sha256=outcome.results_sha256)
    else:
        record(f"entry {entry_id}'s {stage} result", queue.finish_stage, run, outcome.status, outcome.message,
               outcome.manifest, reason=outcome.reason, outcome=OUTCOME[outcome.status], scores=outcome.scores,
               exam=outcome.exam, scoring=outcome.scoring)
        _write_report(queue, site, entry_id)


class Recorder:
    """Writes to the queue, waiting out a queue that cannot be written (its disk full, say)
    rather than dropping a result or letting the daemon die: once space is freed, the
    result lands. If the daemon stops meanwhile, Cancelled leaves the stage marked running
    for the next daemon to run again."""

    RETRY = 5.0

    def __init__(self, cancel: threading.Event | None):
        self.cancel = cancel or threading.Event()

    def __call__(self, what: str, write: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        warned = False
        while True:
            try:
                return write(*args, **kwargs)
            except sqlite3.OperationalError as exc:
                if not warned:
                    log.error("cannot record %s in the queue (%s): free space on its disk; retrying every %.0f s",
                              what, exc, self.RETRY)
                    warned = True
            if self.cancel.wait(self.RETRY):
                raise Cancelled("the daemon is stopping")


def _write_report(queue: Queue, site: Site, entry_id: int) -> None:
    """The HTML copy of the report is a convenience (`show` renders it from the queue at any
    time): failing to write it is logged, never fatal."""
    try:
        write_html(queue, site, entry_id)
    except OSError as exc:
        log.error("entry %d: could not write its HTML report (%s); `vmjudge show` still has it", entry_id, exc)
