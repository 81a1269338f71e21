"""Stage 1 for a submission entry (#60, DrivenData's `submission.zip`): unpack it with every member
checked, find main.py or main.sh at its top, and install it in a new home disk, which the quiz and
the exam see at the runtime's code directory (stages/submission.py). There is no setup.sh: the
runtime is the challenge's image, and a submission brings its code and model assets only.

Two names are the runtime's: the data directory (the record set goes there, read-only) and the file
the run must leave (submission.csv); a submission holding either is refused, so the data is always
the judge's and a submission is always the run's own.
"""

from __future__ import annotations

from ...archive.components import check_components
from ...errors import EntryError
from ...vm.job import Command, Job
from ..context import StageContext, StageOutcome
from ..figures import measured
from ..submission import mains, rules_of
from .unpacked import listed_tree, unpack_entry


def run(ctx: StageContext) -> StageOutcome:
    ch = ctx.challenge
    rules = rules_of(ch)

    def refused(reason: str, said: str) -> StageOutcome:
        return StageOutcome("failed", f"{said} Entry not scored.", reason=reason, manifest=ctx.manifest("prep"))

    try:
        unpack_entry(ctx)
    except EntryError as exc:
        return StageOutcome("failed", f"The entry could not be unpacked: {exc}", reason=exc.reason,
                            manifest=ctx.manifest("prep"))
    try:  # what `submit` checked too (archive/components.py): main.py, the runtime's names free, room in the home
        check_components(ch, listed_tree(ctx.entry_dir), "zip")
    except EntryError as exc:
        return refused(exc.reason, str(exc))
    found = mains(ctx.entry_dir)
    ctx.home_disk.unlink(missing_ok=True)
    ctx.jobs.new_home(ctx.home_disk, ch.vm.home_mib)
    # Installing is the whole stage: the agent copies the submission into the home, then a command of
    # the entry's confirms it is there as the entry sees it.
    job = Job(commands=(Command("install", ("test", "-r", sorted(found)[0]), ch.limits.setup),),
              media={"entry": ctx.entry_dir}, install="entry", stop_on_failure=True)
    try:
        run_ = ctx.run("prep", job, ctx.home_disk)
    except EntryError as exc:  # the agent could not install it: the entry does not fit its home disk
        return refused(exc.reason, str(exc))
    manifest = ctx.manifest("prep", run_)
    figures = measured(ctx, run_, ("install",), ch.limits.setup, None)
    installed = run_.transcript.commands[0] if run_.transcript.commands else None
    if installed is None or installed.status != "ok":
        return StageOutcome("failed", "The submission could not be installed in the runtime. Entry not scored.",
                            reason="setup-error", manifest=manifest, figures=figures)
    return StageOutcome("passed", f"The submission is installed in {rules.code_dir} ({', '.join(sorted(found))} "
                        "found).", manifest=manifest, figures=figures)
