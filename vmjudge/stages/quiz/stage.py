"""Stage 2, quiz: next.sh on every training record must reproduce what the entry submitted.

Runs in a VM on a throw-away overlay of the post-setup home disk with the training set on
the CD. The first error, timeout or mismatch ends the stage: the agent stops at an error
or a timeout, and the host destroys the VM at a mismatch (the channel is one-way, so the
host acts rather than asks). An entry holding DRYRUN ends here with the original message.
"""

from __future__ import annotations

from dataclasses import replace

from ...supervisor.channel import CommandResult, Transcript
from ...supervisor.job import Command, Job
from ...supervisor.reading import Limits
from ..answers import parse_answer_lines
from ..context import DRYRUN_MESSAGE, StageContext, StageOutcome, capped_text, script_argv

# Result files (style "files") are data, not console output: they get their own, larger cap
# (a longer file arrives truncated, so it can never match or score as complete). answers.txt
# keeps the output cap: it is sent after every quiz record.
RESULT_FILE_LIMIT = 16 << 20


def record_job(ctx: StageContext, subset: str, records: tuple[str, ...], collect_each: bool) -> Job:
    """next.sh RECORD for each record, with the record's files linked beside it."""
    ch = ctx.challenge
    media = {f"{subset}/RECORDS": ("\n".join(records) + "\n").encode()}
    file_limit = max(RESULT_FILE_LIMIT, ch.limits.output) if ch.results.style == "files" else ch.limits.output
    commands = []
    for i, record in enumerate(records):
        files = ch.record_files(subset, record)
        media.update({f"{subset}/{f.name}": f for f in files})
        last = i == len(records) - 1
        collect = (ch.results.output_name(record),) if collect_each or last else ()
        commands.append(Command(f"next.sh {record}", script_argv("next.sh", record), ch.limits.per_record,
                                output_limit=ch.limits.output, links=tuple(f"{subset}/{f.name}" for f in files),
                                collect=collect, file_limit=file_limit))
    return Job(commands=tuple(commands), media=media)


class Comparison:
    """Compares each record's result with the entry's own submission, as results arrive."""

    def __init__(self, ctx: StageContext):
        self.ctx = ctx
        self.rule = ctx.challenge.results
        self._verdicts: dict[int, str | None] = {}  # each finished record is compared once
        if self.rule.style == "answer-lines":
            source = ctx.entry_dir / self.rule.submitted
            self.submitted = parse_answer_lines(source.read_bytes() if source.is_file() else None)

    def mismatch(self, record: str, cmd: CommandResult, earlier: tuple[str, ...] = ()) -> str | None:
        name = self.rule.output_name(record)
        got = cmd.files.get(name)
        produced = got.data if got is not None and got.size is not None else None
        if self.rule.style == "answer-lines":
            lines = parse_answer_lines(produced)
            answer = lines.get(record)
            if answer is None:
                return f"next.sh {record}: no line for {record} in answers.txt"
            if answer != self.submitted.get(record):
                return f"next.sh {record}: output does not match submission"
            # answers.txt is the entry's whole answer sheet: a next.sh that loses or changes
            # earlier lines would lose them in the exam too.
            for prev in earlier:
                if lines.get(prev) != self.submitted.get(prev):
                    return f"next.sh {record}: answers.txt no longer holds the submitted line for {prev}"
            return None
        if produced is None:
            return f"next.sh {record}: no output file {name}"
        submitted = self.ctx.entry_dir / self.rule.submitted_path(record)
        if not submitted.is_file() or got.truncated or submitted.read_bytes() != produced:
            return f"next.sh {record}: output does not match submission"
        return None

    def first_failure(self, transcript: Transcript, records: tuple[str, ...]) -> tuple[int, str, str] | None:
        """(index, reason, message) of the first record that failed, timed out or mismatched."""
        limit = self.ctx.challenge.limits.per_record
        for i, cmd in enumerate(transcript.commands):
            if cmd.status == "running":
                return None
            if cmd.status == "timeout":
                return i, "quiz-timeout", f"next.sh {records[i]}: timed out after {limit:.0f} s"
            if cmd.status != "ok":
                return i, "quiz-error", f"next.sh {records[i]}: failed (exit status {cmd.exit_code})"
            if i not in self._verdicts:
                self._verdicts[i] = self.mismatch(records[i], cmd, records[:i])
            wrong = self._verdicts[i]
            if wrong:
                return i, "quiz-mismatch", wrong
        return None


def run(ctx: StageContext) -> StageOutcome:
    ch = ctx.challenge
    records = ch.training
    job = replace(record_job(ctx, "training", records, collect_each=True), stop_on_failure=True)
    compare = Comparison(ctx)
    overlay = ctx.results_dir / "quiz-overlay.qcow2"
    ctx.runner.overlay(overlay, ctx.home_disk)
    try:
        run_ = ctx.run("quiz", job, overlay, Limits(stage_cap=ch.limits.quiz_total),
                       should_stop=lambda t: compare.first_failure(t, records) is not None)
    finally:
        overlay.unlink(missing_ok=True)
    t = run_.transcript
    log = "\n".join(f"=== next.sh {records[c.index]} ({c.status})\n"
                    + capped_text(bytes(c.output), ch.limits.output, c.truncated) for c in t.commands)
    ctx.write_log("quiz", log)
    manifest = ctx.manifest("quiz", run_)
    failure = compare.first_failure(t, records)
    if failure is not None:
        i, reason, message = failure
        cmd = t.commands[i]
        output = capped_text(bytes(cmd.output), ch.limits.output, cmd.truncated)
        return StageOutcome("failed", f"{message}. Entry not scored.\n--- output of next.sh {records[i]} ---\n"
                            f"{output}", reason=reason, manifest=manifest)
    if run_.ended == "capped" or len(t.commands) < len(records):
        return StageOutcome("failed", f"The quiz did not finish within {ch.limits.quiz_total:.0f} s "
                            f"({len(t.commands)} of {len(records)} training records run). Entry not scored.",
                            reason="quiz-timeout", manifest=manifest)
    if (ctx.entry_dir / "DRYRUN").exists():
        return StageOutcome("dry-run", DRYRUN_MESSAGE, manifest=manifest)
    return StageOutcome("passed", f"All {len(records)} training records reproduced the submitted answers.",
                        manifest=manifest)
