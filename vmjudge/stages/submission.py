"""A submission entry's run (#60, DrivenData's code execution): the quiz and the exam each run its
command once over the whole record set, in the runtime's code directory with the set read-only in the
data directory beside it (config/submission.py), and check the submission.csv it leaves against the
set's submission format (submission_check.py). Shared here so that no stage imports another.

What the participant is told differs by stage. The quiz runs on the public sample, as DrivenData's
smoke test does: its verdict names the ids and values that differ, and the log follows. The exam is
silent: a format problem is named by its kind and counts only, never by an id, a value or a name the
entry wrote (each would carry whatever the entry chose to put there: the test set's labels).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..config import Challenge
from ..config.submission import MAINS, SubmissionRules, read_format, set_files
from ..vm.channel import CommandResult, Watch
from ..vm.job import CodeDir, Command, Job
from ..vm.reading import Limits
from .context import StageContext
from .figures import measured
from .records import RESULT_FILE_LIMIT, RecordRuns
from .submission_check import Checked, check_submission


def rules_of(ch: Challenge) -> SubmissionRules:
    if ch.submission is None:
        raise RuntimeError(f"challenge {ch.name} takes no submission entries")
    return ch.submission


def submission_set_media(ch: Challenge, subset: str) -> dict[str, Path | bytes]:
    """What a stage's CD holds of a record set (all under `subset/`, its data disk): every file of its
    directory, the submission format among them."""
    return {f"{subset}/{rel}": path for rel, path in set_files(ch.set_dir(subset)).items()}


def mains(entry_dir: Path) -> set[str]:
    """Which of main.py and main.sh the unpacked submission holds at its top."""
    return {m for m in MAINS if (entry_dir / m).is_file() and not (entry_dir / m).is_symlink()}


def file_limit(ch: Challenge, subset: str) -> int:
    """The most of submission.csv the host takes: four times the format's size, and at least 16 MiB."""
    return max(RESULT_FILE_LIMIT, ch.limits.output, 4 * (ch.set_dir(subset) / rules_of(ch).format).stat().st_size)


def submission_runs(ctx: StageContext, subset: str, records: tuple[str, ...], stage_limit: float) -> RecordRuns:
    """The submission's command once over `subset`, in the code directory, its output collected."""
    ch = ctx.challenge
    rules = rules_of(ch)
    argv = rules.argv(mains(ctx.entry_dir))
    command = Command(" ".join(argv), argv, stage_limit, output_limit=ch.limits.output,
                      tail_limit=ch.limits.output_tail, collect=(rules.output,), file_limit=file_limit(ch, subset))
    job = Job(commands=(command,), media=submission_set_media(ch, subset), data=(subset,),
              code=CodeDir(rules.code_dir, rules.data, subset), stop_on_failure=True)
    return RecordRuns(job, (records,), ("whole set",), stage_limit)


@dataclass(frozen=True)
class Verdict:
    """What a run came to: `reason` (None when its submission matches the format) and one sentence."""

    reason: str | None
    said: str
    checked: Checked | None = None


def verdict(ch: Challenge, subset: str, cmd: CommandResult | None, silent: bool) -> Verdict:
    """The run's command's end, and its submission against the set's format. `silent` (the exam): no
    id, value or name the entry wrote, and no exit status, is said."""
    rules = rules_of(ch)
    stage = "exam" if silent else "quiz"
    where = f"{rules.code_dir}/{rules.output}"
    if cmd is None or cmd.status == "running":
        return Verdict(f"{stage}-timeout", "it did not finish")
    if cmd.status == "timeout":
        return Verdict(f"{stage}-timeout", f"{cmd.name} timed out")
    if cmd.status != "ok":
        return Verdict(f"{stage}-error", f"{cmd.name} failed" + ("" if silent else (
            f": {cmd.message}" if cmd.message else f" (exit status {cmd.exit_code})")))
    got = cmd.files.get(rules.output)
    if got is None or got.size is None:
        return Verdict(f"{stage}-output", f"{cmd.name} left no {where}")
    if got.truncated:
        return Verdict(f"{stage}-output", f"{where} is larger than the {file_limit(ch, subset):,} bytes taken")
    fmt = read_format(ch.set_dir(subset) / rules.format)
    checked = check_submission(bytes(got.data), fmt, rules.output, same_order=rules.order == "same",
                               silent=silent)
    if checked.problem is not None:
        return Verdict(f"{stage}-format", checked.problem, checked)
    return Verdict(None, f"{rules.output} matches the submission format", checked)



@dataclass(frozen=True)
class Ran:
    """A submission stage's one run: its job, the run, its figures and manifest, its command, and the verdict."""

    runs: RecordRuns
    figures: dict
    manifest: dict
    cmd: CommandResult | None
    found: Verdict


def run_once(ctx: StageContext, stage: str, subset: str, cap: float, silent: bool) -> Ran:
    """The quiz's or the exam's run over `subset`, on a throw-away overlay of stage 1's home, under the stage's
    cap, and its verdict (`silent`: the exam's, whose outputs only the organiser's log keeps)."""
    records = ctx.challenge.training if subset == "training" else ctx.challenge.test
    runs = submission_runs(ctx, subset, records, cap)
    overlay = ctx.files.overlay(stage)
    ctx.jobs.overlay(overlay, ctx.home_disk)
    try:
        with ctx.stage_log(stage) as log:
            run_ = ctx.run(stage, runs.job, overlay, Limits(stage_cap=cap), watch=Watch(log=log, keep_all=not silent))
    finally:
        overlay.unlink(missing_ok=True)
    cmd = run_.transcript.commands[0] if run_.transcript.commands else None
    return Ran(runs, measured(ctx, run_, runs.names, runs.command_limit, cap), ctx.manifest(stage, run_), cmd,
               verdict(ctx.challenge, subset, cmd, silent))
