"""Stage 2, quiz: next.sh on every training record must reproduce what the entry submitted
(a container entry: the image's command, per record or once for the whole set, in its own root).

Runs in a VM on a throw-away overlay of the post-setup home disk with the training set on
the CD. The first error, timeout or mismatch ends the stage: the agent stops at an error
or a timeout, and the host destroys the VM at a mismatch (the channel is one-way, so the
host acts rather than asks). An entry holding DRYRUN (a container entry: an image labelled
org.vmjudge.dryrun, as admission read it) ends here with the original message.
"""

from __future__ import annotations

import os
import stat
from dataclasses import replace
from typing import NamedTuple

from ...scorers.loader import answer_check
from ...vm.channel import CommandResult, Watch
from ...vm.reading import JobRun, Limits
from ..answers import parse_answer_lines, read_answer_lines, refused_line
from ..container import container_runs, recorded_root
from ..context import (
    DRYRUN_LABEL_MESSAGE,
    DRYRUN_MESSAGE,
    SMOKE_MESSAGE,
    StageContext,
    StageOutcome,
    output_text,
    warnings_text,
)
from ..figures import measured
from ..records import RecordRuns, record_runs
from ..sockets import case_outputs
from . import submission
from .mismatch import file_detail, line_detail, numbers_note, numbers_only, numbers_only_files

# What a passed quiz's report shows of each training case's logs, as Grand Challenge's sanity phase does.
OUTPUT_SHOWN = 1000  # bytes of its stdout
WARNINGS_SHOWN = 2000  # characters of its stderr


class Failure(NamedTuple):
    """The first command that failed the quiz, why (a reason of vmjudge/reasons) and what to say."""

    command: int  # its index in the job
    reason: str
    said: str


class Comparison:
    """Compares each record's result with the entry's own submission as each command ends,
    and remembers the first failure; the run stops there (Watch.on_end).

    answers.txt comes back after every record. It normally only grows, so the part already
    checked is compared byte for byte and only the new lines are parsed; a next.sh that
    rewrote it has the whole file checked again, earlier records included."""

    def __init__(self, ctx: StageContext, records: tuple[str, ...], runs: RecordRuns | None = None):
        self.ctx = ctx
        self.records = records
        # Which records each command answers, and its name (next.sh's: one command per record).
        self.covers = runs.covers if runs is not None else tuple((r,) for r in records)
        self.names = tuple(c.name for c in runs.job.commands) if runs is not None else \
            tuple(f"next.sh {r}" for r in records)
        self.limit = runs.command_limit if runs is not None else ctx.challenge.limits.per_record
        self._order = {r: i for i, r in enumerate(records)}
        self.rule = ctx.challenge.results
        self.shown: list[str] = []  # with sockets: what each training case left, for the report
        self.failure: Failure | None = None
        self.numbers_only = False  # the mismatch is one of last digits alone (mismatch.py)
        self._checked = b""  # answers.txt up to its last newline, as last checked
        self._answers: dict[str, str] = {}  # what that part of answers.txt says
        # Records already run whose line is not in that part yet (a last line with no newline):
        # checked again each time, so a line that is lost before it gets its newline is caught.
        self._unsettled: set[str] = set()
        if self.rule.style == "answer-lines":  # prep has bounded its size
            self.submitted = read_answer_lines(ctx.entry_dir / self.rule.submitted)

    def on_end(self, cmd: CommandResult) -> bool:
        if self.failure is None:
            self.failure = self._verdict(cmd)
        return self.failure is not None

    def _verdict(self, cmd: CommandResult) -> Failure | None:
        name = self.names[cmd.index]
        if cmd.status == "timeout":
            return Failure(cmd.index, reason="quiz-timeout", said=f"{name}: timed out after {self.limit:.0f} s")
        if cmd.status != "ok":
            why = f": {cmd.message}" if cmd.message else f" (exit status {cmd.exit_code})"
            if (cmd.usage or {}).get("oom_kills"):  # Docker would say 137: killed for memory
                why = f": killed, out of memory (exit status 137: its memory is {self.ctx.challenge.vm.memory_mib} " \
                      "MiB of the VM less what the judge keeps)"
            return Failure(cmd.index, reason="quiz-error", said=f"{name}: failed{why}")
        if self.rule.style == "sockets":
            return self._outputs(cmd)
        for record in self.covers[cmd.index]:  # one record, or the whole set's in order
            wrong = self._answer_line(cmd, record) if self.rule.style == "answer-lines" else \
                self._file(cmd, record, name)
            if wrong:
                return Failure(cmd.index, reason="quiz-mismatch", said=wrong)
        return None

    def _outputs(self, cmd: CommandResult) -> Failure | None:
        """[quiz] check = "outputs": every output socket present and valid (stages/sockets.py);
        "none": the case ran without error, whatever it left."""
        record = self.covers[cmd.index][0]
        found = case_outputs(self.ctx.challenge, "training", record, cmd)
        said = bytes(cmd.output[:OUTPUT_SHOWN]).decode("utf-8", "replace").rstrip()
        self.shown.append(f"{record}: " + "; ".join(found.shown) +
                          (f"\n--- output (stdout, {cmd.output_bytes} bytes) ---\n{said}" if said else "") +
                          (f"\n{warnings_text(cmd, WARNINGS_SHOWN)}" if cmd.error_bytes else ""))
        if self.ctx.challenge.quiz_check == "outputs" and found.problems:
            return Failure(cmd.index, reason="quiz-output", said="; ".join(found.problems))
        return None

    def _answer_line(self, cmd: CommandResult, record: str) -> str | None:
        got = cmd.files.get("answers.txt")
        produced = got.data if got is not None and got.size is not None else b""
        if produced.startswith(self._checked):
            new = parse_answer_lines(produced[len(self._checked):])
            earlier = {r for r in new if self._order.get(r, cmd.index) < cmd.index} | self._unsettled
        else:  # rewritten: check it all again
            self._checked, self._answers = b"", {}
            new = parse_answer_lines(produced)
            earlier = set(self.records[:cmd.index])
        answers = {**self._answers, **new}
        sheet = self.rule.submitted
        if answers.get(record) is None:
            return f"next.sh {record}: no line for {record} in answers.txt" + \
                line_detail(record, self.submitted.get(record), None, sheet)
        if answers[record] != self.submitted.get(record):
            self.numbers_only = numbers_only((self.submitted.get(record) or "").encode(), answers[record].encode())
            return f"next.sh {record}: output does not match submission" + \
                line_detail(record, self.submitted.get(record), answers[record], sheet)
        # answers.txt is the entry's whole answer sheet: a next.sh that loses or changes
        # earlier lines would lose them in the exam too.
        for prev in sorted(earlier, key=self._order.__getitem__):
            if answers.get(prev) != self.submitted.get(prev):
                return f"next.sh {record}: answers.txt no longer holds the submitted line for {prev}" + \
                    line_detail(prev, self.submitted.get(prev), answers.get(prev), sheet)
        cut = produced.rfind(b"\n") + 1  # a last line still without its newline is read again next time
        self._answers.update(parse_answer_lines(produced[len(self._checked):cut]))
        self._checked = produced[:cut]
        self._unsettled = {r for r in earlier | {record} if r not in self._answers}
        return None

    def _file(self, cmd: CommandResult, record: str, command: str) -> str | None:
        name = self.rule.output_name(record)
        got = cmd.files.get(name)
        if got is None or got.size is None:
            return f"{command}: no output file {name}"
        submitted = self.ctx.entry_dir / self.rule.stored_path(record)
        try:
            st = os.lstat(submitted)
        except OSError:
            st = None
        # Sizes first: the submitted file is read only when it can match, and read once.
        if st is not None and stat.S_ISREG(st.st_mode) and not got.truncated and st.st_size == got.size:
            with open(submitted, "rb") as f:
                if f.read(got.size + 1) == got.data:
                    return None
        self.numbers_only = numbers_only_files(submitted, got.data, got.size, got.truncated)
        return f"{command}: output does not match submission" + file_detail(
            submitted, self.rule.submitted_path(record), name, got.data, got.size, got.truncated)


def refused_answer(ctx: StageContext) -> StageOutcome | None:
    """The quiz's first check, before any VM: a submitted answer that the challenge's built-in
    scorer refuses, as the official scoring code refused it ([score] invalid_answers =
    "refuse"), fails the entry here, naming the line, before it spends an exam."""
    ch = ctx.challenge
    check = answer_check(ch.scorer)
    if ch.results.style != "answer-lines" or check is None or ch.score_options.invalid_answers != "refuse":
        return None
    found = refused_line(ctx.entry_dir / ch.results.submitted, set(ch.training), check)
    if found is None:
        return None
    return StageOutcome("failed", f"{ch.results.submitted} {found}; the official {ch.scorer} scoring refuses such "
                        "an answer: make next.sh write only the allowed answers. Entry not scored.",
                        reason="quiz-invalid-answer", manifest={"stage": "quiz"})


def run(ctx: StageContext) -> StageOutcome:
    ch = ctx.challenge
    if ch.entry.kind == "submission":
        return submission.run(ctx)
    refused = refused_answer(ctx)
    if refused is not None:
        return refused
    records = ch.training
    if ch.entry.kind == "container":
        runs = container_runs(ctx, "training", records, recorded_root(ctx), ch.limits.quiz_total)
    else:
        runs = record_runs(ctx, "training", records, collect_each=True)
    job = replace(runs.job, stop_on_failure=True)
    compare = Comparison(ctx, records, runs)
    overlay = ctx.files.overlay("quiz")
    ctx.jobs.overlay(overlay, ctx.home_disk)
    try:
        with ctx.stage_log("quiz") as log:
            run_ = ctx.run("quiz", job, overlay, Limits(stage_cap=ch.limits.quiz_total),
                           watch=Watch(log=log, on_end=compare.on_end, keep_all=False))
    finally:
        overlay.unlink(missing_ok=True)
    return replace(_outcome(ctx, run_, compare), figures=measured(ctx, run_, runs.names, runs.command_limit,
                                                                  ch.limits.quiz_total))


def _outcome(ctx: StageContext, run_: JobRun, compare: Comparison) -> StageOutcome:
    ch = ctx.challenge
    records = ch.training
    t = run_.transcript
    manifest = ctx.manifest("quiz", run_)
    if compare.failure is not None:
        i, reason, message = compare.failure
        # The verdict on the first line, the mismatch's two sides (if any) under it, then the output.
        headline, _, sides = message.partition("\n")
        if reason == "quiz-mismatch" and compare.numbers_only:
            sides += "\n" + numbers_note(((run_.hardware or {}).get("guest_cpu") or {}).get("level"))
        return StageOutcome("failed", f"{headline}. Entry not scored." + (f"\n{sides}" if sides else "")
                            + f"\n--- output of {compare.names[i]} ---\n{output_text(t.commands[i])}",
                            reason=reason, manifest=manifest)
    done = sum(len(compare.covers[c.index]) for c in t.commands if c.status != "running")
    if run_.ended == "capped" or done < len(records):
        return StageOutcome("failed", f"The quiz did not finish within {ch.limits.quiz_total:.0f} s "
                            f"({done} of {len(records)} training records run). Entry not scored.",
                            reason="quiz-timeout", manifest=manifest)
    if ch.entry.kind == "container" and ctx.entry.dry_run:
        return StageOutcome("dry-run", DRYRUN_LABEL_MESSAGE, manifest=manifest)
    if ch.entry.kind != "container" and (ctx.entry_dir / "DRYRUN").exists():
        return StageOutcome("dry-run", DRYRUN_MESSAGE, manifest=manifest)
    if ctx.entry.dry_run:  # a smoke test: a dry run asked for at upload
        return StageOutcome("dry-run", SMOKE_MESSAGE, manifest=manifest)
    if ch.quiz_check != "submitted":
        what = "left valid outputs" if ch.quiz_check == "outputs" else "ran without error"
        return StageOutcome("passed", f"All {len(records)} training cases {what}:\n" + "\n".join(compare.shown),
                            manifest=manifest)
    return StageOutcome("passed", f"All {len(records)} training records reproduced the submitted answers.",
                        manifest=manifest)
