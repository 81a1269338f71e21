"""Stage 3, exam: next.sh on every test record, silently, under the stage's cap.

Errors and timeouts do not stop it; a failed record gets an empty answer. Nothing the
entry prints reaches the participant: the report gives counts only, and the outputs are
kept for organisers in exam.log. Over the cap, the entry fails with the share of records
it processed and gets no score. The results are archived (content-addressed, see
results_store) for stage 4, and for any re-scoring later.
"""

from __future__ import annotations

from ... import results_store
from ...supervisor.reading import Limits
from ..answers import parse_answer_lines
from ..context import StageContext, StageOutcome, capped_text
from ..quiz.stage import record_job

# Where a home made before the results store kept them (read once, then archived).
LEGACY_RESULTS_FILE = "exam-results.json"


def run(ctx: StageContext) -> StageOutcome:
    ch = ctx.challenge
    records = ch.test
    files_style = ch.results.style == "files"
    job = record_job(ctx, "test", records, collect_each=files_style)
    overlay = ctx.results_dir / "exam-overlay.qcow2"
    ctx.runner.overlay(overlay, ctx.home_disk)
    try:
        run_ = ctx.run("exam", job, overlay, Limits(stage_cap=ch.limits.exam_total))
    finally:
        overlay.unlink(missing_ok=True)
    t = run_.transcript
    statuses = {records[c.index]: c.status for c in t.commands}
    counts = {"records": len(records),
              "completed": sum(1 for s in statuses.values() if s == "ok"),
              "failed": sum(1 for s in statuses.values() if s == "error"),
              "timed_out": sum(1 for s in statuses.values() if s == "timeout")}
    ctx.write_log("exam", "\n".join(f"=== next.sh {records[c.index]} ({c.status}, exit {c.exit_code})\n"
                                    + capped_text(bytes(c.output), ch.limits.output, c.truncated)
                                    for c in t.commands))
    manifest = ctx.manifest("exam", run_)
    done = sum(1 for s in statuses.values() if s != "running")
    if run_.ended == "capped" or done < len(records):
        share = 100.0 * done / len(records)
        return StageOutcome("failed", f"The exam exceeded its limit of {ch.limits.exam_total:.0f} s after "
                            f"processing {done} of {len(records)} test records ({share:.0f} %). Entry not scored.",
                            reason="exam-timeout", exam=counts, manifest=manifest)
    if files_style:
        files = {}
        for c in t.commands:
            record = records[c.index]
            got = c.files.get(ch.results.output_name(record))
            ok = c.status == "ok" and got is not None and got.size is not None and not got.truncated
            files[record] = got.data if ok else None
        blob = results_store.encode(records, statuses, ch.results.style, files=files)
    else:
        last = t.commands[-1].files.get("answers.txt") if t.commands else None
        lines = parse_answer_lines(last.data if last is not None and last.size is not None else None)
        answers = {r: (lines.get(r) if statuses.get(r) == "ok" else None) for r in records}
        blob = results_store.encode(records, statuses, ch.results.style, answers=answers)
    digest = results_store.put(ctx.site.home, blob)
    return StageOutcome("passed", f"{counts['records']} test records: {counts['completed']} completed, "
                        f"{counts['failed']} failed, {counts['timed_out']} timed out.", exam=counts,
                        manifest={**manifest, "results_sha256": digest}, results_sha256=digest)
