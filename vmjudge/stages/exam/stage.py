"""Stage 3, exam: next.sh on every test record (a container entry: the image's command, per
record or once for the whole set), silently, under the stage's cap.

Errors and timeouts do not stop it; a failed record gets an empty answer. Nothing the
entry prints reaches the participant: the report gives counts only, and the outputs are
kept for organisers in exam.log. Over the cap, the entry fails with the share of records
it processed and gets no score. The results are archived (content-addressed, see
queue/results.py) for stage 4, and for any re-scoring later.
"""

from __future__ import annotations

import functools
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from ...config import Challenge
from ...queue.results import encode_chunks, put_chunks
from ...vm.channel import CommandResult, Watch
from ...vm.reading import JobRun, Limits
from ..answers import parse_answer_lines
from ..container import container_runs, recorded_root
from ..context import StageContext, StageOutcome
from ..figures import measured
from ..records import RecordRuns, record_runs
from ..sockets import case_outputs
from . import submission


class ResultFiles:
    """Style "files": each record's result file, put on disk as its command ends (the host
    keeps no more than one in memory), within the stage's budget of result bytes; a file
    past the budget is not kept, and its record gets no answer."""

    def __init__(self, directory: Path, output_name: Callable[[str], str], budget: int, runs: RecordRuns,
                 sockets: Challenge | None = None):
        self.directory = directory
        self.sockets = sockets  # a challenge with sockets: its outputs are kept by socket
        self.invalid: set[str] = set()  # cases that ran, and left an output socket missing or invalid
        self.output_name = output_name
        self.budget = budget
        self.runs = runs
        self._index = {r: i for i, r in enumerate(r for covered in runs.covers for r in covered)}
        self.kept = 0
        self.over_budget = 0  # records whose file the budget could not take
        shutil.rmtree(directory, ignore_errors=True)  # a retried stage starts afresh
        directory.mkdir(mode=0o700)

    def on_end(self, cmd: CommandResult) -> bool:
        if cmd.status != "ok":
            return False
        if self.sockets is not None:
            return self._sockets(cmd)
        for record in self.runs.covers[cmd.index]:
            got = cmd.files.get(self.output_name(record))
            if got is None or got.size is None or got.truncated:
                continue
            if self.kept + len(got.data) > self.budget:
                self.over_budget += 1
                continue
            (self.directory / str(self._index[record])).write_bytes(got.data)
            self.kept += len(got.data)
        return False

    def _sockets(self, cmd: CommandResult) -> bool:
        """A case's outputs by socket, each valid one kept; a case with any invalid is failed, as
        Grand Challenge fails a job whose output is missing."""
        assert self.sockets is not None
        record = self.runs.covers[cmd.index][0]
        found = case_outputs(self.sockets, "test", record, cmd)
        if found.problems:  # failed, as a Grand Challenge job missing an output: none of its values is kept
            self.invalid.add(record)
            return False
        for i, data in enumerate(found.values.values()):
            if data is None:
                continue
            if self.kept + len(data) > self.budget:
                self.over_budget += 1
                continue
            (self.directory / f"{self._index[record]}.{i}").write_bytes(data)
            self.kept += len(data)
        return False

    def source(self, record: str) -> Callable[[], bytes] | None:
        path = self.directory / str(self._index[record])
        return (lambda: path.read_bytes()) if path.exists() else None

    def socket_sources(self, record: str) -> dict[str, Callable[[], bytes] | None]:
        """"RECORD/SLUG" -> each output socket's kept value, for the results store."""
        assert self.sockets is not None and self.sockets.sockets is not None
        found: dict[str, Callable[[], bytes] | None] = {}
        for i, socket in enumerate(self.sockets.sockets.outputs):
            path = self.directory / f"{self._index[record]}.{i}"
            found[f"{record}/{socket.slug}"] = functools.partial(path.read_bytes) if path.exists() else None
        return found


def run(ctx: StageContext) -> StageOutcome:
    ch = ctx.challenge
    if ch.entry.kind == "submission":
        return submission.run(ctx)
    records = ch.test
    files_style = ch.results.style in ("files", "sockets")
    if ch.entry.kind == "container":
        runs = container_runs(ctx, "test", records, recorded_root(ctx), ch.limits.exam_total)
    else:
        runs = record_runs(ctx, "test", records, collect_each=files_style)
    overlay = ctx.files.overlay("exam")
    kept = ResultFiles(ctx.files.exam_files, ch.results.output_name, ch.limits.stage_results,
                       runs, ch if ch.sockets is not None else None) if files_style else None
    ctx.jobs.overlay(overlay, ctx.home_disk)
    try:
        with ctx.stage_log("exam") as log:
            run_ = ctx.run("exam", runs.job, overlay, Limits(stage_cap=ch.limits.exam_total),
                           watch=Watch(log=log, on_end=kept.on_end if kept else None, keep_all=False))
        return replace(_outcome(ctx, run_, runs, kept), figures=measured(ctx, run_, runs.names, runs.command_limit,
                                                                         ch.limits.exam_total))
    finally:
        overlay.unlink(missing_ok=True)
        if kept is not None:
            shutil.rmtree(kept.directory, ignore_errors=True)


def _outcome(ctx: StageContext, run_: JobRun, runs: RecordRuns, kept: ResultFiles | None) -> StageOutcome:
    ch = ctx.challenge
    records = ch.test
    t = run_.transcript
    statuses = {r: c.status for c in t.commands for r in runs.covers[c.index]}
    if kept is not None:  # a case that left a socket missing or invalid failed, as a Grand Challenge job does
        statuses.update(dict.fromkeys(kept.invalid, "error"))
    counts = {"records": len(records),
              "completed": sum(1 for s in statuses.values() if s == "ok"),
              "failed": sum(1 for s in statuses.values() if s == "error"),
              "timed_out": sum(1 for s in statuses.values() if s == "timeout")}
    manifest = ctx.manifest("exam", run_)
    # What each case wrote to stderr, kept apart (a container run Grand Challenge's way): its warnings, counted
    # for the organiser only; participants learn nothing of a test case but the counts above.
    warned = {r: c.error_bytes for c in t.commands for r in runs.covers[c.index] if c.error_bytes}
    if warned:
        manifest["stderr_bytes"] = warned
    done = sum(1 for s in statuses.values() if s != "running")
    if run_.ended == "capped" or done < len(records):
        share = 100.0 * done / len(records)
        return StageOutcome("failed", f"The exam exceeded its limit of {ch.limits.exam_total:.0f} s after "
                            f"processing {done} of {len(records)} test records ({share:.0f} %). Entry not scored.",
                            reason="exam-timeout", exam=counts, manifest=manifest)
    if kept is not None:
        if ch.sockets is not None:
            files = {k: v for r in statuses for k, v in kept.socket_sources(r).items()}
        else:
            files = {r: kept.source(r) for r in statuses}
        chunks = encode_chunks(records, statuses, ch.results.style, files=files)
        if kept.over_budget:
            manifest["results_over_budget"] = kept.over_budget
    else:
        last = t.commands[-1].files.get("answers.txt") if t.commands else None
        lines = parse_answer_lines(last.data if last is not None and last.size is not None else None)
        answers = {r: (lines.get(r) if statuses.get(r) == "ok" else None) for r in records}
        chunks = encode_chunks(records, statuses, ch.results.style, answers=answers)
    digest = put_chunks(ctx.site.home, chunks)
    return StageOutcome("passed", f"{counts['records']} test records: {counts['completed']} completed, "
                        f"{counts['failed']} failed, {counts['timed_out']} timed out.", exam=counts,
                        manifest={**manifest, "results_sha256": digest}, results_sha256=digest)
