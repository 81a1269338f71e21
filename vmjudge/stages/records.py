"""The job both the quiz (training records) and the exam (test records) run: next.sh once per
record, with the record's files on the CD. Shared here so neither stage imports the other."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..config import Challenge
from ..vm.job import Command, Job
from .context import StageContext, script_argv

# Result files (style "files") are data, not console output: they get their own, larger cap
# (a longer file arrives truncated, so it can never match or score as complete). answers.txt
# keeps the output cap: it is sent after every quiz record.
RESULT_FILE_LIMIT = 16 << 20


@dataclass(frozen=True)
class RecordRuns:
    """A stage's job over records and which records each command answers (its results are
    theirs): one command per record (next.sh, or a container entry's per_case run), or one for
    the whole set (a container entry's whole_set run)."""

    job: Job
    covers: tuple[tuple[str, ...], ...]  # by command index
    names: tuple[str, ...]  # each command's name in the figures: its record, or "whole set"
    command_limit: float  # seconds each command may take


def record_runs(ctx: StageContext, subset: str, records: tuple[str, ...], collect_each: bool) -> RecordRuns:
    """record_job as RecordRuns: one command per record."""
    return RecordRuns(record_job(ctx, subset, records, collect_each), tuple((r,) for r in records), records,
                      ctx.challenge.limits.per_record)


def record_job(ctx: StageContext, subset: str, records: tuple[str, ...], collect_each: bool) -> Job:
    """next.sh RECORD for each record, with the record's files linked beside it."""
    ch = ctx.challenge
    file_limit = max(RESULT_FILE_LIMIT, ch.limits.output) if ch.results.style == "files" else ch.limits.output
    commands = []
    for i, record in enumerate(records):
        files = ch.record_files(subset, record)
        last = i == len(records) - 1
        collect = (ch.results.output_name(record),) if collect_each or last else ()
        commands.append(Command(f"next.sh {record}", script_argv("next.sh", record), ch.limits.per_record,
                                output_limit=ch.limits.output, tail_limit=ch.limits.output_tail,
                                links=tuple(f"{subset}/{f.name}" for f in files), collect=collect,
                                file_limit=file_limit))
    return Job(commands=tuple(commands), media=record_set_media(ch, subset, records), data=(subset,))


def record_set_media(ch: Challenge, subset: str, records: tuple[str, ...]) -> dict[str, Path | bytes]:
    """What a stage's CD holds of a record set, all under `subset/` (its data disk, Job.data): the
    list of its records (RECORDS) and each record's files (RECORD.*)."""
    media: dict[str, Path | bytes] = {f"{subset}/RECORDS": ("\n".join(records) + "\n").encode()}
    for record in records:
        media.update({f"{subset}/{f.name}": f for f in ch.record_files(subset, record)})
    return media
