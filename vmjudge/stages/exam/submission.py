"""Stage 3 for a submission entry (#60): the submission's command once over the test set (a stepped
one, once per step), silently, under the stage's cap; each submission.csv checked against its format,
and the rows by id archived for stage 4. Nothing the entry prints or writes reaches the participant: a
failed run is said without its exit status, a format problem by its kind and counts
(stages/submission.py).

A whole-set run that fails fails the exam. A stepped run's steps are as an archive entry's records: a
step that fails, times out or leaves a submission.csv off its format is counted, and its ids have no
rows (the scorer's "missing"); the steps that passed are scored.
"""

from __future__ import annotations

from dataclasses import replace

from ...queue.results import encode_chunks, put_chunks
from ..context import StageContext, StageOutcome
from ..submission import Ran, rules_of, run_once


def run(ctx: StageContext) -> StageOutcome:
    ch = ctx.challenge
    ran = run_once(ctx, "exam", "test", ch.limits.exam_total, silent=True)
    statuses: dict[str, str] = {}
    rows: dict[str, dict[str, str] | None] = {}
    for ids, found in zip(ran.runs.covers, ran.found, strict=True):
        status = "ok" if found.reason is None else "timeout" if found.reason == "exam-timeout" else "error"
        for i in ids:
            statuses[i] = status
            rows[i] = found.checked.rows[i] if found.checked is not None and found.checked.rows is not None \
                and status == "ok" else None
    counts = {"records": len(ch.test), **{k: sum(1 for s in statuses.values() if s == v) for k, v in
                                           (("completed", "ok"), ("failed", "error"), ("timed_out", "timeout"))}}
    stepped = rules_of(ch).steps
    if ran.unfinished:
        share = f" after {sum(1 for v in ran.found if not v.unfinished)} of {len(ran.parts)} steps" if stepped else ""
        return _failed(ran, f"The exam exceeded its limit of {ch.limits.exam_total:.0f} s{share}. Entry not scored.",
                       "exam-timeout", counts)
    if not stepped and ran.found[0].reason is not None:
        return _failed(ran, f"On the test set, {ran.found[0].said.rstrip('.')}. Entry not scored.",
                       ran.found[0].reason, counts)
    digest = put_chunks(ctx.site.home, encode_chunks(ch.test, statuses, "table", rows=rows))
    if not stepped:
        said = f"{len(ch.test)} test rows: {ran.found[0].said}."
    else:
        steps = [v.reason for v in ran.found]
        said = (f"{len(ran.parts)} test steps ({len(ch.test)} rows): {steps.count(None)} completed, "
                f"{sum(1 for r in steps if r not in (None, 'exam-timeout'))} failed or off the format, "
                f"{steps.count('exam-timeout')} timed out.")
    return replace(StageOutcome("passed", said, exam=counts, manifest={**ran.manifest, "results_sha256": digest},
                                results_sha256=digest), figures=ran.figures)


def _failed(ran: Ran, said: str, reason: str | None, counts: dict) -> StageOutcome:
    return replace(StageOutcome("failed", said, reason=reason, exam=counts, manifest=ran.manifest), figures=ran.figures)
