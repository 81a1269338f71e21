"""Stage 2 for a submission entry (#60): DrivenData's smoke test. The submission's command runs once
over the training set (the challenge's public sample; a stepped one, once per step, stopping at the
first step that fails, as the quiz stops at a record's) and each submission.csv is checked against its
format; the participant sees the verdict, the first ids or values that differ, and the run's log. An
entry holding DRYRUN ends here, as an archive entry does.
"""

from __future__ import annotations

from dataclasses import replace

from ..context import DRYRUN_MESSAGE, SMOKE_MESSAGE, StageContext, StageOutcome
from ..submission import Ran, rules_of, run_once


def run(ctx: StageContext) -> StageOutcome:
    ch = ctx.challenge
    ran = run_once(ctx, "quiz", "training", ch.limits.quiz_total, silent=False)
    stepped = rules_of(ch).steps
    failed = next(((k, v) for k, v in enumerate(ran.found) if v.reason is not None), None)
    if failed is not None:
        k, first = failed
        reason = "quiz-timeout" if first.unfinished else first.reason
        said = (f"{'the steps' if stepped else ran.runs.job.commands[0].name} did not finish within "
                f"{ch.limits.quiz_total:.0f} s on the sample") if first.unfinished else first.said
        if stepped:
            said += f" (step {k + 1} of {len(ran.parts)}; the quiz stops at the first step that fails)"
        return replace(StageOutcome("failed", f"{said.rstrip('.')}. Entry not scored.{ran.logs}", reason=reason,
                                    manifest=ran.manifest), figures=ran.figures)
    if (ctx.entry_dir / "DRYRUN").exists() or ctx.entry.dry_run:  # DRYRUN in the zip, or a smoke test
        said = DRYRUN_MESSAGE if (ctx.entry_dir / "DRYRUN").exists() else SMOKE_MESSAGE
        return replace(StageOutcome("dry-run", said + ran.logs, manifest=ran.manifest), figures=ran.figures)
    return replace(StageOutcome("passed", f"{passed(ran, len(ch.training), stepped)}.{ran.logs}",
                                manifest=ran.manifest), figures=ran.figures)


def passed(ran: Ran, rows: int, stepped: bool) -> str:
    if not stepped:
        return f"The sample's {rows} rows: {ran.found[0].said}"
    return f"The sample's {len(ran.parts)} steps ({rows} rows): each step's submission.csv matches its format"
