"""Stage 2 for a submission entry (#60): DrivenData's smoke test. The submission's command runs once
over the training set (the challenge's public sample; a stepped one, once per step) and each
submission.csv is checked against its format; the participant sees the verdict, the first ids or values
that differ, and the run's log. An entry holding DRYRUN ends here, as an archive entry does.
"""

from __future__ import annotations

from dataclasses import replace

from ..context import DRYRUN_MESSAGE, SMOKE_MESSAGE, StageContext, StageOutcome
from ..submission import Ran, run_once


def run(ctx: StageContext) -> StageOutcome:
    ch = ctx.challenge
    ran = run_once(ctx, "quiz", "training", ch.limits.quiz_total, silent=False)
    log_text = ran.logs
    failed = [v for v in ran.found if v.reason is not None]
    if failed:
        reason = "quiz-timeout" if ran.unfinished else failed[0].reason
        said = f"{ran.runs.job.commands[0].name if len(ran.parts) == 1 else 'the steps'} did not finish within " \
            f"{ch.limits.quiz_total:.0f} s on the sample" if ran.unfinished else failed[0].said
        if len(ran.parts) > 1:
            said += f" ({len(ran.parts) - len(failed)} of {len(ran.parts)} steps passed)"
        return replace(StageOutcome("failed", f"{said.rstrip('.')}. Entry not scored.{log_text}", reason=reason,
                                    manifest=ran.manifest), figures=ran.figures)
    if (ctx.entry_dir / "DRYRUN").exists() or ctx.entry.dry_run:  # DRYRUN in the zip, or a smoke test
        said = DRYRUN_MESSAGE if (ctx.entry_dir / "DRYRUN").exists() else SMOKE_MESSAGE
        return replace(StageOutcome("dry-run", said + log_text, manifest=ran.manifest), figures=ran.figures)
    return replace(StageOutcome("passed", f"{passed(ran, len(ch.training))}.{log_text}", manifest=ran.manifest),
                   figures=ran.figures)


def passed(ran: Ran, rows: int) -> str:
    if len(ran.parts) == 1:
        return f"The sample's {rows} rows: {ran.found[0].said}"
    return f"The sample's {len(ran.parts)} steps ({rows} rows): each step's submission.csv matches its format"
