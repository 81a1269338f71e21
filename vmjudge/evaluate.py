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
import threading
from typing import Callable

from .config import load_challenge
from .errors import Cancelled, ImageError, InfrastructureError, VmjudgeError
from .images.build import find_image
from .queue.db import EntryRow, Queue, StageRun
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


def run_stage(queue: Queue, site: Site, entry: EntryRow, slot: int, cancel: threading.Event | None = None) -> None:
    """Run the entry's current stage once and record what came of it."""
    stage = str(entry.stage)
    run = queue.start_stage(entry.id, stage, site.uri, slot)
    conn = None
    try:
        challenge = load_challenge(queue.challenge_dir(entry.challenge))
        try:
            image = find_image(site, challenge.image)
        except ImageError as exc:
            raise InfrastructureError("image-missing", str(exc))
        image.check()
        if stage != "score":
            from .supervisor import vm  # here: the replica ISO imports this module without libvirt

            conn = vm.connect(site.uri)
        ctx = StageContext(site=site, challenge=challenge, image=image, conn=conn, entry=entry,
                           attempt=run.attempt, cancel=cancel)
        outcome = STAGES[stage](ctx)
    except Cancelled:
        log.info("entry %d %s attempt %d: abandoned, the daemon is stopping", entry.id, stage, run.attempt)
        queue.cancel_stage(run)
        return
    except InfrastructureError as exc:
        log.warning("entry %d %s attempt %d: %s", entry.id, stage, run.attempt, exc)
        queue.infra_failure(run, exc.reason, str(exc), {"stage": stage, "attempt": run.attempt, "host": site.uri})
        return
    except VmjudgeError as exc:  # image missing, challenge moved: the organiser's to fix, not the entry's
        queue.infra_failure(run, "setup-problem", str(exc), {"stage": stage, "attempt": run.attempt})
        return
    except OSError as exc:  # the host's disk, not the entry: e.g. no space left for the results
        reason = "host-disk-full" if exc.errno == errno.ENOSPC else "host-io"
        queue.infra_failure(run, reason, f"the host could not write the stage's files: {exc}",
                            {"stage": stage, "attempt": run.attempt})
        return
    except Exception as exc:  # a bug of ours must not stop the daemon, nor be charged to the entry
        log.exception("entry %d %s attempt %d failed inside vmjudge", entry.id, stage, run.attempt)
        queue.infra_failure(run, "internal-error", f"{type(exc).__name__}: {exc}",
                            {"stage": stage, "attempt": run.attempt})
        return
    finally:
        if conn is not None:
            conn.close()
    record_outcome(queue, site, entry.id, run, stage, outcome)
    log.info("entry %d %s: %s %s", entry.id, stage, outcome.status, outcome.reason or "")


def record_outcome(queue: Queue, site: Site, entry_id: int, run: StageRun, stage: str, outcome: StageOutcome) -> None:
    """Move the entry on after a stage the entry (not the infrastructure) decided; the replica
    ISO records its stages 1 and 2 through here too, so its report is the judge's."""
    if outcome.status == "passed":
        queue.finish_stage(run, "passed", outcome.message, outcome.manifest, next_stage=NEXT_STAGE[stage],
                           exam=outcome.exam)
    else:
        queue.finish_stage(run, outcome.status, outcome.message, outcome.manifest, reason=outcome.reason,
                           outcome=OUTCOME[outcome.status], scores=outcome.scores, exam=outcome.exam)
        write_html(queue, site, entry_id)
