"""Stage 3 for a submission entry (#60): the submission's command once over the test set, silently,
under the stage's cap; its submission.csv checked against the test set's format, and its rows by id
archived for stage 4. Nothing the entry prints or writes reaches the participant: a failed run is said
without its exit status, a format problem by its kind and counts (stages/submission.py).
"""

from __future__ import annotations

from dataclasses import replace

from ...queue.results import encode_chunks, put_chunks
from ..context import StageContext, StageOutcome
from ..submission import run_once


def run(ctx: StageContext) -> StageOutcome:
    ch = ctx.challenge
    records = ch.test
    ran = run_once(ctx, "exam", "test", ch.limits.exam_total, silent=True)
    figures, manifest, found = ran.figures, ran.manifest, ran.found
    ok = found.reason is None
    counts = {"records": len(records), "completed": len(records) if ok else 0,
              "failed": 0 if ok or found.reason == "exam-timeout" else len(records),
              "timed_out": len(records) if found.reason == "exam-timeout" else 0}
    if found.reason == "exam-timeout":
        return replace(StageOutcome("failed", f"The exam exceeded its limit of {ch.limits.exam_total:.0f} s. Entry "
                                    "not scored.", reason="exam-timeout", exam=counts, manifest=manifest),
                       figures=figures)
    if not ok:
        return replace(StageOutcome("failed", f"On the test set, {found.said.rstrip('.')}. Entry not scored.",
                                    reason=found.reason, exam=counts, manifest=manifest), figures=figures)
    assert found.checked is not None and found.checked.rows is not None
    statuses = dict.fromkeys(records, "ok")
    digest = put_chunks(ctx.site.home, encode_chunks(records, statuses, "table", rows=found.checked.rows))
    return replace(StageOutcome("passed", f"{len(records)} test rows: {found.said}.", exam=counts,
                                manifest={**manifest, "results_sha256": digest}, results_sha256=digest),
                   figures=figures)
