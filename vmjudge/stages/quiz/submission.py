"""Stage 2 for a submission entry (#60): DrivenData's smoke test. The submission's command runs once
over the training set (the challenge's public sample) and its submission.csv is checked against the
sample's submission format; the participant sees the verdict, the first ids or values that differ, and
the run's log. An entry holding DRYRUN ends here, as an archive entry does.
"""

from __future__ import annotations

from dataclasses import replace

from ...vm.channel import Watch
from ...vm.reading import Limits
from ..context import DRYRUN_MESSAGE, SMOKE_MESSAGE, StageContext, StageOutcome, output_text
from ..figures import measured
from ..submission import submission_runs, verdict


def run(ctx: StageContext) -> StageOutcome:
    ch = ctx.challenge
    runs = submission_runs(ctx, "training", ch.training, ch.limits.quiz_total)
    overlay = ctx.files.overlay("quiz")
    ctx.jobs.overlay(overlay, ctx.home_disk)
    try:
        with ctx.stage_log("quiz") as log:
            run_ = ctx.run("quiz", runs.job, overlay, Limits(stage_cap=ch.limits.quiz_total), watch=Watch(log=log))
    finally:
        overlay.unlink(missing_ok=True)
    figures = measured(ctx, run_, runs.names, runs.command_limit, ch.limits.quiz_total)
    manifest = ctx.manifest("quiz", run_)
    cmd = run_.transcript.commands[0] if run_.transcript.commands else None
    found = verdict(ch, "training", cmd, silent=False)
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
