"""Everything a participant can be given about entries, built here from one allow-list.

A judge's first promise is that the test set stays secret, and each field given to a participant is a
channel for it: a hash of the reference answers gave the hidden labels back by brute force (4^8 label
sets in a second), a hash of the exam's results any bits an entry chose to encode in its answers, and
the moment an entry's state left the exam its exact run time. So every document a participant can
receive (`show` and `show --json` without `--organiser`, the HTML report, each portal page and API
answer, the leaderboards in every format) is built by the functions below and passed through
`allowed()` with the allow-list of its kind: a field not on the list never reaches a participant,
whatever a caller adds. docs/participants.md ("Reading a report") lists the same fields and why.

And every such document is seen as at a moment `at`: from the start of an entry's exam until its
publish time (queue/publish.py), the entry is "being examined" and nothing of the exam or of a later
stage shows, nor any timestamp after the exam's start; after it, those timestamps read as the publish
time, never the real one; a container entry's stage 1 likewise (publish.py says why). Organisers see
everything at once (report.show(..., organiser=True)).

In a contest ([[phase]]), an entry of a phase that keeps its results back is seen, until the organiser
publishes the phase, at the phase's feedback level (phase_view.py): "errors" shows the entry's state
and verdict, and for a failure its stage and reason, but no stage's message, count, figure, score,
hardware or budget; "none" only that the entry was received. The level is applied after the exam's
masking, so no document can carry what the level leaves out.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..pipeline import FIRST, PIPELINE, STAGE_NAMES, UNPUBLISHED, by_name
from ..queue.publish import being_examined, preparing
from ..queue.rows import EntryRow, Scoring, StageRun, stamp
from ..reasons import explanation
from .figures import participant_lines, participant_view

# The documents as they will read once published: for the organiser's copy of a report
# (report.html) and for `vmjudge evaluate`, which waits for the entry and is the organiser's.
AS_PUBLISHED = math.inf

LEAF = None  # a value shown as it is (a number, a string, a boolean, null)
ANY = "*"  # a key of a mapping that may be any name: a scorer's own fields

# The allow-lists. A mapping says which keys may appear and what each holds; a list of one
# spec, a list of such values.
SCORES = {ANY: LEAF}
EXAM_COUNTS = {"records": LEAF, "completed": LEAF, "failed": LEAF, "timed_out": LEAF}
SCORING = {"at": LEAF, "why": LEAF, "scorer": LEAF, "scorer_version": LEAF, "scores": SCORES}
# Stage 1 and the quiz run on the participant's files: every figure, training cases' samples too. Exam: tenths.
USAGE = {"seconds": LEAF, "status": LEAF, "cpu_seconds": LEAF, "peak_memory": LEAF, "oom_kills": LEAF,
         "processes": LEAF}
PREP_FIGURES = {"command_limit": LEAF, "memory_limit": LEAF, "peak_memory": LEAF, "home_used": LEAF,
                "home_size": LEAF, "instance": LEAF, **USAGE}
QUIZ_FIGURES = {**PREP_FIGURES, "stage_seconds": LEAF, "stage_limit": LEAF, "slowest": [LEAF], "vcpus": LEAF,
                "gpu_memory": LEAF, "records": [{"record": LEAF, **USAGE, "samples": [[LEAF]]}]}
EXAM_FIGURES = {"time_tenths": LEAF, "time_cap_seconds": LEAF, "memory_tenths": LEAF, "memory_cap": LEAF}
HARDWARE = {"host": LEAF, "cpu": LEAF, "host_cores": LEAF, "kernel": LEAF, "qemu": LEAF, "libvirt": LEAF,
            "vcpus": LEAF, "memory_mib": LEAF, "accel": LEAF, "gpu": LEAF,
            "guest_cpu": {"setting": LEAF, "model": LEAF, "level": LEAF, "flags": [LEAF]}}
# What participants are told of an entry of a contest phase before the phase is published
# (config/phase.py FEEDBACK): everything, its errors only, or nothing.
FULL, ERRORS, NONE = "full", "errors", "none"
# An entry's report (show --json, GET /api/entries/ID). The archive's sha256 is the
# participant's own file: a receipt of what was judged.
ENTRY = {"id": LEAF, "challenge": LEAF, "phase": LEAF, "carried_from": LEAF, "feedback": LEAF, "owner": LEAF,
         "late": LEAF, "archive_name": LEAF, "archive_sha256": LEAF,
         "submitted_at": LEAF, "state": LEAF, "stage": LEAF, "outcome": LEAF, "failed_stage": LEAF, "reason": LEAF,
         "evaluation": LEAF, "scores": SCORES, "exam": EXAM_COUNTS, "scorings": [SCORING], "report": LEAF,
         "figures": {"prep": PREP_FIGURES, "quiz": QUIZ_FIGURES, "exam": EXAM_FIGURES}, "hardware": HARDWARE,
         "budget": {"vm_hours": LEAF, "used": LEAF}}
# The portal's report page: the entry's report, its verdict, the sentence of a phase keeping its
# results back, and each of the four stages as a step: its status (steps() says which), the
# failure's reason, and the message the report's text already gives.
STEP = {"stage": LEAF, "title": LEAF, "status": LEAF, "reason": LEAF, "message": LEAF}
REPORT_PAGE = {**ENTRY, "steps": [STEP], "verdict": LEAF, "kept_back": LEAF}
# A line of "my entries" (the portal's list, GET /api/entries).
ENTRY_ROW = {"id": LEAF, "challenge": LEAF, "phase": LEAF, "late": LEAF, "archive_name": LEAF, "submitted_at": LEAF,
             "state": LEAF, "stage": LEAF, "outcome": LEAF, "verdict": LEAF, "score": LEAF}
ENTRY_LIST = {"total": LEAF, "page": LEAF, "limit": LEAF, "entries": [ENTRY_ROW]}
# A leaderboard row (every format shows these or fewer).
BOARD_ROW = {"rank": LEAF, "owner": LEAF, "entry_id": LEAF, "score": LEAF, "submitted_at": LEAF, "scores": SCORES}
# A board's history (the portal's chart): for each owner on it, each counted scored entry's
# submission time and the owner's best score once that entry was in. The best is the board's own
# figure as it stood, shown to everyone then; an entry that did not raise it gives its time only.
BOARD_HISTORY = [{"owner": LEAF, "points": [{"submitted_at": LEAF, "best": LEAF}]}]
# What an upload is answered with.
SUBMITTED = {"id": LEAF, "owner": LEAF, "late": LEAF, "dry_run": LEAF, "phase": LEAF, "carried_from": LEAF,
             "remaining": LEAF, "budget": LEAF}
# A contest's phases as participants may know them (vmjudge phases, the portal's phases page):
# each phase's window and rules, whether it is published, and who was promoted into it. A
# promotion's place on a board that participants cannot see yet is left out, and so are its act
# and time (phase_view.py): the phase's acts of promotion are listed apart, each with its count.
PROMOTED = {"owner": LEAF, "place": LEAF, "how": LEAF, "at": LEAF}
PROMOTION = {"how": LEAF, "at": LEAF, "count": LEAF}
PHASE = {"name": LEAF, "opens": LEAF, "closes": LEAF, "state": LEAF, "takes": LEAF, "carry": LEAF,
         "entrants": LEAF, "feedback": LEAF, "board": LEAF, "published": LEAF, "training": LEAF,
         "promoted": [PROMOTED], "promotions": [PROMOTION]}
PHASES = {"challenge": LEAF, "phases": [PHASE]}
ERROR = {"error": LEAF}


def allowed(value: Any, spec: Any) -> Any:
    """`value` with everything its allow-list `spec` does not name taken out, at every depth."""
    if spec is LEAF:
        return value if value is None or isinstance(value, (str, int, float, bool)) else None
    if isinstance(spec, list):
        return [allowed(v, spec[0]) for v in value] if isinstance(value, list) else None
    if not isinstance(value, dict):
        return None
    return {k: allowed(v, spec[k] if k in spec else spec[ANY]) for k, v in value.items()
            if k in spec or (ANY in spec and isinstance(k, str))}


def now() -> float:
    return time.time()


# Seeing an entry as at a moment


def examining(entry: EntryRow, at: float) -> bool:
    """Whether the entry is "being examined" for participants at `at`: its exam started in
    this evaluation and its publish time has not come (or is not known yet)."""
    return being_examined(entry, at)


def withheld(entry: EntryRow, at: float) -> bool:
    """Whether anything of the entry is held back from participants at `at`: being examined, or
    a stage 1 not yet published. Its `published` says until when (None: not known yet)."""
    return examining(entry, at) or preparing(entry, at)


def shown_time(entry: EntryRow, t: str) -> str:
    """A timestamp as participants may see it: one between the exam's start and the publish
    time reads as the publish time (an organiser's later re-scoring keeps its own)."""
    if entry.exam_started is None or entry.published is None or t < stamp(entry.exam_started):
        return t
    return max(t, stamp(entry.published))


@dataclass(frozen=True)
class Seen:
    """An entry, its stage runs and scorings as participants see them at one moment; `feedback`
    the level its phase shows them at then (FULL outside contests)."""

    entry: EntryRow
    runs: list[StageRun]
    scorings: list[Scoring]
    feedback: str = FULL

    @classmethod
    def at(cls, entry: EntryRow, runs: Sequence[StageRun], scorings: Sequence[Scoring], at: float,
           feedback: str = FULL) -> Seen:
        if preparing(entry, at):  # a container's stage 1 not yet published: seen running, nothing after it
            masked = replace(entry, state="running", stage=FIRST, outcome=None, failed_stage=None, reason=None,
                             scores=None, exam=None, finished_at=None)
            seen = cls(masked, [r for r in runs if r.evaluation != entry.evaluation or r.status in (None, "infra")],
                       list(scorings))
        elif not examining(entry, at):
            seen = cls(entry, list(runs), [replace(s, at=shown_time(entry, s.at)) for s in scorings])
        else:
            started = stamp(entry.exam_started or 0)
            masked = replace(entry, state="running", stage=UNPUBLISHED[0], outcome=None, failed_stage=None,
                             reason=None, scores=None, exam=None, finished_at=None)
            seen = cls(masked, [r for r in runs if not (r.evaluation == entry.evaluation and r.stage in UNPUBLISHED)],
                       [s for s in scorings if s.at < started])
        return seen.kept_back(feedback)

    def kept_back(self, feedback: str) -> Seen:
        """What a phase's feedback level leaves of this view: ERRORS keeps the entry's state and
        verdict only; NONE that it was received."""
        if feedback == FULL:
            return self
        e = self.entry
        if feedback == ERRORS:
            return Seen(replace(e, scores=None, exam=None, finished_at=None), [], [], ERRORS)
        return Seen(replace(e, state="received", stage=None, outcome=None, failed_stage=None, reason=None,
                            scores=None, exam=None, finished_at=None), [], [], NONE)


def final_runs(runs: list[StageRun]) -> list[StageRun]:
    """The run of each stage whose result counted (the last one that was not an infrastructure
    failure), in the entry's latest evaluation (`rescore --rerun-stages` starts a new one)."""
    latest = max((r.evaluation for r in runs), default=1)
    chosen: dict[str, StageRun] = {}
    for r in runs:
        if r.status not in (None, "infra") and r.evaluation == latest:
            chosen[r.stage] = r
    return [chosen[s.name] for s in PIPELINE if s.name in chosen]


def verdict(entry: EntryRow, feedback: str = FULL) -> str:
    phase = f"phase {entry.phase}"
    if feedback == NONE:
        return f"Received: {phase} gives no feedback until its results are published."
    if entry.state == "parked":
        return ("Evaluation could not be completed because of a problem on the judge's side; the organisers have "
                "been told.")
    if entry.state != "done":
        if entry.state == "running" and entry.stage in UNPUBLISHED:
            return "Evaluation in progress: being examined on the test set."
        return f"Evaluation in progress ({entry.state}, stage {entry.stage})."
    if entry.outcome == "scored":
        return "Entry scored." if feedback == FULL else f"Entry scored; its score is shown once {phase} is published."
    if entry.outcome == "dry-run":
        return "Dry run completed."
    return f"Entry not scored ({entry.failed_stage}: {entry.reason})."


def rescore_line(scorings: list[Scoring]) -> str | None:
    """One sentence when the latest scoring is a re-scoring: the stage-4 message above it
    gives the score of the official scoring, which no longer counts."""
    if not scorings or scorings[-1].why != "rescore":
        return None
    last, before = scorings[-1], (scorings[-2] if len(scorings) > 1 else None)
    key = "score" if "score" in last.scores else next(iter(last.scores))
    was = f" (was {before.scores[key]:.4f})" if before is not None and key in before.scores else ""
    return f"Re-scored {last.at} with scorer {last.scorer_version}: {key} {last.scores[key]:.4f}{was}."


def header(entry: EntryRow) -> str:
    phase = f", phase {entry.phase}" if entry.phase else ""
    carried = f" (carried from entry {entry.carried_from})" if entry.carried_from else ""
    return (f"Entry {entry.id} ({entry.archive_name}) for {entry.challenge}{phase} by {entry.owner}"
            f"{' (late)' if entry.late else ''}, submitted {entry.submitted_at}{carried}")


KEPT_BACK = {ERRORS: "Phase {phase} tells only whether an entry failed, and where, until its results are "
                     "published: no counts, figures or scores before then.",
             NONE: "Phase {phase} gives no feedback until its results are published."}


def report_text(seen: Seen) -> str:
    """The participant's report as text: each counted stage's message and what it used (a phase
    that keeps its results back: a line saying so, and the verdict)."""
    entry = seen.entry
    lines = [header(entry), ""]  # a failed entry's verdict is followed by its reason's row (vmjudge/reasons)
    why = [w] if seen.feedback != NONE and entry.outcome == "failed" and (w := explanation(entry.reason)) else []
    if seen.feedback != FULL:
        return "\n".join([*lines, KEPT_BACK[seen.feedback].format(phase=entry.phase), "", verdict(entry, seen.feedback),
                          *why]) + "\n"
    for r in final_runs(seen.runs):
        lines.append(f"{by_name(r.stage).title}: {r.message}")
        if r.figures:
            lines += participant_lines(r.stage, r.figures)
        lines.append("")
    rescored = rescore_line(seen.scorings) if entry.state == "done" and entry.outcome == "scored" else None
    if rescored:
        lines += [rescored, ""]
    lines += [verdict(entry), *why]
    return "\n".join(lines).rstrip() + "\n"


def entry_document(seen: Seen, budget: dict[str, Any] | None = None) -> dict[str, Any]:
    """An entry's report as a participant receives it (show --json, GET /api/entries/ID)."""
    entry, final = seen.entry, final_runs(seen.runs)
    doc: dict[str, Any] = {
        "id": entry.id, "challenge": entry.challenge, "owner": entry.owner, "late": entry.late,
        "archive_name": entry.archive_name, "archive_sha256": entry.archive_sha256,
        "submitted_at": entry.submitted_at, "state": entry.state, "stage": entry.stage,
        "outcome": entry.outcome, "failed_stage": entry.failed_stage,
        "reason": entry.reason if entry.state == "done" else None,
        "scores": entry.scores or {}, "exam": entry.exam, "evaluation": entry.evaluation,
        "scorings": [{"at": s.at, "why": s.why, "scorer": s.scorer, "scorer_version": s.scorer_version,
                      "scores": s.scores} for s in seen.scorings],
        "report": report_text(seen),
        "figures": {r.stage: participant_view(r.stage, r.figures) for r in final if r.figures}}
    if entry.phase is not None:
        doc.update({"phase": entry.phase, "carried_from": entry.carried_from, "feedback": seen.feedback})
    ran = [r.manifest["hardware"] for r in seen.runs if r.manifest and r.manifest.get("hardware")]
    if ran:
        doc["hardware"] = ran[-1]  # where its latest VM stage (as seen) ran
    if budget is not None and seen.feedback == FULL:  # the budget's tenths carry the exam's time
        doc["budget"] = budget
        doc["report"] += (f"VM time on this board: {budget['used']} of the {budget['vm_hours']:g} h budget used "
                          f"by {entry.owner}.\n")
    return allowed(doc, ENTRY)


def steps(seen: Seen) -> list[dict[str, Any]]:
    """Each stage of the pipeline as a step of the report page, from the same runs and entry
    fields as report_text (a stage that counted: its run's status and message), so a step
    says nothing the text does not."""
    entry, runs = seen.entry, {r.stage: r for r in final_runs(seen.runs)}
    return [{"stage": s.name, "title": s.title,
             "status": _step_status(seen, s.name, runs[s.name].status if s.name in runs else None),
             "reason": entry.reason if entry.state == "done" and entry.failed_stage == s.name else None,
             "message": runs[s.name].message if s.name in runs else None} for s in PIPELINE]


def _step_status(seen: Seen, stage: str, ran: str | None) -> str:
    """A stage that did not count a run: passed (the entry went past it), failed, running,
    waiting, stopped (parked), not-run (after a failure or a dry run), or kept-back (its phase's
    feedback level gives no more than the verdict)."""
    e, order = seen.entry, list(STAGE_NAMES)
    if ran is not None:
        return "passed" if ran == "scored" else ran
    if seen.feedback == NONE or (seen.feedback != FULL and e.state == "done" and e.outcome != "failed"):
        return "kept-back"
    at = e.failed_stage if e.state == "done" else e.stage
    if at not in order:  # done without a failure: scored, or a dry run whose later stages did not run
        return "passed" if e.outcome == "scored" else "not-run"
    if stage != at:
        return "passed" if order.index(stage) < order.index(at) else "not-run" if e.state == "done" else "waiting"
    return {"done": "failed", "running": "running", "parked": "stopped"}.get(e.state, "waiting")


def report_page(seen: Seen, budget: dict[str, Any] | None = None) -> dict[str, Any]:
    """The portal's report page: the entry's document (entry_document) and its steps."""
    kept_back = KEPT_BACK[seen.feedback].format(phase=seen.entry.phase) if seen.feedback != FULL else None
    return allowed({**entry_document(seen, budget), "steps": steps(seen), "verdict": verdict(seen.entry, seen.feedback),
                    "kept_back": kept_back}, REPORT_PAGE)


def entry_row(entry: EntryRow, at: float, feedback: str = FULL) -> dict[str, Any]:
    """One entry as its owner sees it in the list and in GET /api/entries."""
    e = Seen.at(entry, (), (), at, feedback).entry
    row = {"id": e.id, "challenge": e.challenge, "late": e.late, "archive_name": e.archive_name,
           "submitted_at": e.submitted_at, "state": e.state, "stage": e.stage,
           "outcome": e.outcome if e.state == "done" else None, "verdict": verdict(e, feedback),
           "score": (e.scores or {}).get("score") if e.state == "done" else None}
    if e.phase is not None:
        row["phase"] = e.phase
    return allowed(row, ENTRY_ROW)


def entry_list(entries: Sequence[EntryRow], total: int, page: int, limit: int | None, at: float,
               feedback: Callable[[EntryRow, float], str] = lambda entry, at: FULL) -> dict[str, Any]:
    """A page of the owner's entries; `feedback` gives each entry's level at `at`."""
    doc: dict[str, Any] = {"total": total, "page": page,
                           "entries": [entry_row(e, at, feedback(e, at)) for e in entries]}
    if limit is not None:
        doc["limit"] = limit
    return allowed(doc, ENTRY_LIST)


def board_rows(rows: Sequence[Any]) -> list[dict[str, Any]]:
    """A leaderboard's rows (reports/leaderboard.py Row) as participants may see them: no
    hardware, no host (those are in `leaderboard --organiser`)."""
    return [allowed({"rank": r.rank, "owner": r.owner, "entry_id": r.entry_id, "score": r.score,
                     "submitted_at": r.submitted_at, "scores": r.scores}, BOARD_ROW) for r in rows]


def board_history(history: dict[str, list[tuple[str, float]]]) -> list[dict[str, Any]]:
    """A board's history (reports/leaderboard.py history) as participants may see it."""
    return allowed([{"owner": owner, "points": [{"submitted_at": t, "best": best} for t, best in points]}
                    for owner, points in history.items()], BOARD_HISTORY)
