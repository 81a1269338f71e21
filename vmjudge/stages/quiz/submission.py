"""Stage 2 for a submission entry (#60): DrivenData's smoke test. The submission's command runs once
over the training set (the challenge's public sample) and its submission.csv is checked against the
sample's submission format; the participant sees the verdict, the first ids or values that differ, and
the run's log. An entry holding DRYRUN ends here, as an archive entry does.
"""

from __future__ import annotations

from dataclasses import replace

from ..context import DRYRUN_MESSAGE, SMOKE_MESSAGE, StageContext, StageOutcome, output_text
from ..submission import run_once


def run(ctx: StageContext) -> StageOutcome:
    ch = ctx.challenge
    ran = run_once(ctx, "quiz", "training", ch.limits.quiz_total, silent=False)
    runs, figures, manifest, cmd, found = ran.runs, ran.figures, ran.manifest, ran.cmd, ran.found
    log_text = f"\n--- log of {cmd.name} ---\n{output_text(cmd)}" if cmd is not None else ""
    if found.reason is not None:
        if found.reason == "quiz-timeout":
            said = f"{runs.job.commands[0].name} did not finish within {ch.limits.quiz_total:.0f} s on the sample"
        else:
            said = found.said
        return replace(StageOutcome("failed", f"{said.rstrip('.')}. Entry not scored.{log_text}", reason=found.reason,
                                    manifest=manifest), figures=figures)
    if (ctx.entry_dir / "DRYRUN").exists() or ctx.entry.dry_run:  # DRYRUN in the zip, or a smoke test
        said = DRYRUN_MESSAGE if (ctx.entry_dir / "DRYRUN").exists() else SMOKE_MESSAGE
        return replace(StageOutcome("dry-run", said + log_text, manifest=manifest), figures=figures)
    return replace(StageOutcome("passed", f"The sample's {len(ch.training)} rows: {found.said}.{log_text}",
                                manifest=manifest), figures=figures)
