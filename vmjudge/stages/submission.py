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
from ..config.submission import MAINS, STEPS, SubmissionRules, read_format, set_files, set_steps, step_dir
from ..vm.channel import CommandResult, Watch
from ..vm.job import CodeDir, Command, Job
from ..vm.reading import Limits
from .context import StageContext, output_text
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


def file_limit(ch: Challenge, fmt: Path, stepped: bool = False) -> int:
    """The most of a submission.csv the host takes: four times its format's size, and at least 16 MiB (a
    step's: at least the output cap, 1 MiB by default, as a stepped run's steps may be many)."""
    return max(ch.limits.output if stepped else RESULT_FILE_LIMIT, ch.limits.output, 4 * fmt.stat().st_size)


def rows_budget(parts: tuple[Part, ...]) -> int:
    """The most of the submissions' bytes a run's rows may hold together: four times its formats' sizes, and at
    least 16 MiB (what a whole-set run's one file may be): many steps cannot add up to more."""
    return max(RESULT_FILE_LIMIT, 4 * sum(p.format.stat().st_size for p in parts))


@dataclass(frozen=True)
class Part:
    """What one command of a submission's run answers: the whole set, or a step of a stepped one (its name
    the command's), with the format its submission.csv is checked against."""

    step: str | None
    format: Path


def set_parts(ch: Challenge, subset: str) -> tuple[Part, ...]:
    rules = rules_of(ch)
    where = ch.set_dir(subset)
    if not rules.steps:
        return (Part(None, where / rules.format),)
    return tuple(Part(step, step_dir(where, step) / rules.format) for step in set_steps(where))


def submission_runs(ctx: StageContext, subset: str, stage_limit: float) -> RecordRuns:
    """The submission's command once over `subset` (a stepped set: once per step, each under the per-record
    cap, the step's name its last argument), in the code directory, its output collected each time."""
    ch = ctx.challenge
    rules = rules_of(ch)
    argv = rules.argv(mains(ctx.entry_dir))
    parts = set_parts(ch, subset)
    commands = []
    for k, part in enumerate(parts):
        steps = () if part.step is None else tuple(f"{STEPS}/{p.step}" for p in reversed(parts[:k + 1]))
        commands.append(Command(" ".join(argv) if part.step is None else f"step {part.step}",
                                argv if part.step is None else (*argv, part.step),
                                stage_limit if part.step is None else ch.limits.per_record,
                                output_limit=ch.limits.output, tail_limit=ch.limits.output_tail,
                                collect=(rules.output,), file_limit=file_limit(ch, part.format, rules.steps),
                                steps=steps))
    job = Job(commands=tuple(commands), media=submission_set_media(ch, subset), data=(subset,),
              code=CodeDir(rules.code_dir, rules.data, subset, stepped=rules.steps), stop_on_failure=not rules.steps)
    if not rules.steps:
        records = ch.training if subset == "training" else ch.test
        return RecordRuns(job, (records,), ("whole set",), stage_limit)
    return RecordRuns(job, tuple(read_format(p.format).ids for p in parts), tuple(str(p.step) for p in parts),
                      ch.limits.per_record)


@dataclass(frozen=True)
class Verdict:
    """What a command came to: `reason` (None when its submission matches the format) and one sentence;
    `unfinished`: the stage's cap ended it, or the run, before it ended on its own."""

    reason: str | None
    said: str
    checked: Checked | None = None
    unfinished: bool = False


def verdict(ch: Challenge, part: Part, cmd: CommandResult | None, silent: bool) -> Verdict:
    """A command's end, and its submission against the part's format. `silent` (the exam): no id, value or
    name the entry wrote, and no exit status, is said."""
    rules = rules_of(ch)
    stage = "exam" if silent else "quiz"
    where = f"{rules.code_dir}/{rules.output}"
    if cmd is None or cmd.status == "running":
        return Verdict(f"{stage}-timeout", "it did not finish" if part.step is None else
                       f"step {part.step} did not finish", unfinished=True)
    if cmd.status == "timeout":
        return Verdict(f"{stage}-timeout", f"{cmd.name} timed out")
    if cmd.status != "ok":
        return Verdict(f"{stage}-error", f"{cmd.name} failed" + ("" if silent else (
            f": {cmd.message}" if cmd.message else f" (exit status {cmd.exit_code})")))
    got = cmd.files.get(rules.output)
    if got is None or got.size is None:
        return Verdict(f"{stage}-output", f"{cmd.name} left no {where}")
    if got.truncated:
        return Verdict(f"{stage}-output", f"{where} is larger than the "
                       f"{file_limit(ch, part.format, rules.steps):,} bytes taken")
    checked = check_submission(bytes(got.data), read_format(part.format), rules.output,
                               same_order=rules.order == "same", silent=silent)
    if checked.problem is not None:
        return Verdict(f"{stage}-format", checked.problem if part.step is None else
                       f"step {part.step}: {checked.problem}")
    # The rows are the exam's, for the scorer; the quiz only checks them.
    return Verdict(None, f"{rules.output} matches the submission format", checked if silent else None)


@dataclass(frozen=True)
class Ran:
    """A submission stage's run: its job, its figures and manifest, each part's verdict, and (not `silent`)
    the commands' logs as the participant is shown them."""

    runs: RecordRuns
    figures: dict
    manifest: dict
    parts: tuple[Part, ...]
    found: tuple[Verdict, ...]
    logs: str

    @property
    def unfinished(self) -> bool:
        return any(v.unfinished for v in self.found)


class _Judging:
    """Each command's verdict as it ends, and its log (when shown) added to the rest: no more than one
    command's output and files are held (Watch.keep_all off), whatever the number of steps."""

    def __init__(self, ch: Challenge, parts: tuple[Part, ...], silent: bool, log_limit: int):
        self.ch, self.parts, self.silent, self.log_limit = ch, parts, silent, log_limit
        self.found: dict[int, Verdict] = {}
        self.logs = ""
        self.unshown = 0
        self.budget = rows_budget(parts) if parts else 0
        self.kept = 0

    def on_end(self, cmd: CommandResult) -> bool:
        """The command's verdict; True (stop the run) at the quiz's first step that fails, as a record's."""
        found = verdict(self.ch, self.parts[cmd.index], cmd, self.silent)
        if found.checked is not None:  # the exam's rows, held until the run ends: within the run's budget
            got = cmd.files[rules_of(self.ch).output]
            self.kept += len(got.data)
            if self.kept > self.budget:
                found = Verdict("exam-output", f"{cmd.name}'s submission is past the {self.budget:,} bytes the judge "
                                "keeps of a run's submissions together")
        self.found[cmd.index] = found
        self.log(cmd, shown=found.reason is not None)
        return not self.silent and found.reason is not None and len(self.parts) > 1

    def log(self, cmd: CommandResult, shown: bool = False) -> None:
        """`shown`: a failed command's log, added whatever the limit (it is bounded by the command's own)."""
        if self.silent:
            return
        part = f"\n--- log of {cmd.name} ---\n{output_text(cmd)}"
        if self.logs and not shown and (self.unshown or len(self.logs) + len(part) > self.log_limit):
            self.unshown += 1
        else:
            self.logs += part

    def shown(self) -> str:
        return self.logs + (f"\n--- the logs of {self.unshown} more steps are not shown ---" if self.unshown else "")


def run_once(ctx: StageContext, stage: str, subset: str, cap: float, silent: bool) -> Ran:
    """The quiz's or the exam's run over `subset`, on a throw-away overlay of stage 1's home, under the stage's
    cap, and its verdicts (`silent`: the exam's, whose outputs only the organiser's log keeps)."""
    ch = ctx.challenge
    runs = submission_runs(ctx, subset, cap)
    parts = set_parts(ch, subset)
    judging = _Judging(ch, parts, silent, max(ch.limits.output, 1 << 20))
    overlay = ctx.files.overlay(stage)
    ctx.jobs.overlay(overlay, ctx.home_disk)
    try:
        with ctx.stage_log(stage) as log:
            run_ = ctx.run(stage, runs.job, overlay, Limits(stage_cap=cap),
                           watch=Watch(log=log, on_end=judging.on_end, keep_all=False))
    finally:
        overlay.unlink(missing_ok=True)
    last = run_.transcript.commands[-1] if run_.transcript.commands else None
    if last is not None and last.index not in judging.found:  # stopped by the stage's cap, or the run's end
        judging.log(last)
    found = tuple(judging.found.get(i) or verdict(ch, part, None, silent) for i, part in enumerate(parts))
    return Ran(runs, measured(ctx, run_, runs.names, runs.command_limit, cap), ctx.manifest(stage, run_), parts, found,
               judging.shown())
