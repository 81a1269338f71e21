"""Reports: what the participant may see of an entry, and what only organisers may.

The participant's report is built from each stage's participant message, which the stages
write with care (the exam's says counts only). Organisers also get every attempt, with
infrastructure failures and their reasons, the manifests, and the stage logs (each quoted by
its head and tail: the whole log stays on disk).
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import private
from ..config import Site, load_challenge
from ..errors import VmjudgeError
from ..pipeline import PIPELINE, by_name
from ..queue.admit import budget_tenths
from ..queue.db import Queue
from ..queue.rows import EntryRow, Scoring, StageRun
from ..terminal import printable
from .figures import organiser_lines, participant_lines, participant_view


def final_runs(runs: list[StageRun]) -> list[StageRun]:
    """The run of each stage whose result counted (the last one that was not an infrastructure
    failure), in the entry's latest evaluation (`rescore --rerun-stages` starts a new one)."""
    latest = max((r.evaluation for r in runs), default=1)
    chosen: dict[str, StageRun] = {}
    for r in runs:
        if r.status not in (None, "infra") and r.evaluation == latest:
            chosen[r.stage] = r
    return [chosen[s.name] for s in PIPELINE if s.name in chosen]


def verdict(entry: EntryRow) -> str:
    if entry.state == "parked":
        return ("Evaluation could not be completed because of a problem on the judge's side; the organisers have "
                "been told.")
    if entry.state != "done":
        return f"Evaluation in progress ({entry.state}, stage {entry.stage})."
    if entry.outcome == "scored":
        return "Entry scored."
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


def participant_text(entry: EntryRow, runs: list[StageRun], scorings: Sequence[Scoring] = ()) -> str:
    lines = [f"Entry {entry.id} ({entry.archive_name}) for {entry.challenge} by {entry.owner}"
             f"{' (late)' if entry.late else ''}, submitted {entry.submitted_at}", ""]
    for r in final_runs(runs):
        lines.append(f"{by_name(r.stage).title}: {r.message}")
        if r.figures:
            lines += participant_lines(r.stage, r.figures)
        lines.append("")
    rescored = rescore_line(list(scorings)) if entry.state == "done" and entry.outcome == "scored" else None
    if rescored:
        lines += [rescored, ""]
    lines.append(verdict(entry))
    return "\n".join(lines).rstrip() + "\n"


# How much of each stage log `show --organiser` quotes: its head and its tail. A stage log
# may hold up to `stage_output` bytes of what an entry printed (64 MiB by default), which
# quoted whole in JSON would cost the command several times that in memory; the whole log
# stays on disk at the path given beside the excerpt.
LOG_EXCERPT_BYTES = 32 * 1024


def log_excerpt(path: Path, part: int = LOG_EXCERPT_BYTES) -> dict[str, Any]:
    """The log's size and path, and its text whole if it is short, else its first and last
    `part` bytes with a line saying how many bytes lie between them."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size <= 2 * part:
            text = f.read(2 * part).decode(errors="replace")
        else:
            head = f.read(part)
            f.seek(size - part)  # from the size read above: a retry may truncate the log meanwhile
            tail = f.read(part)
            text = (head.decode(errors="replace") + f"\n[... {size - 2 * part} bytes left out here; "
                    f"the whole log is {path} ...]\n" + tail.decode(errors="replace"))
    return {"path": str(path), "bytes": size, "text": text}


def organiser_details(site: Site, entry: EntryRow, runs: list[StageRun]) -> dict[str, Any]:
    results = site.layout.results_of(entry.id)
    logs = {p.name: log_excerpt(p) for p in results.logs()}
    return {"attempts": [{"stage": r.stage, "attempt": r.attempt, "evaluation": r.evaluation,
                          "status": r.status, "reason": r.reason,
                          "message": r.message, "started_at": r.started_at, "finished_at": r.finished_at,
                          "host": r.host, "slot": r.slot, "manifest": r.manifest, "figures": r.figures}
                         for r in runs],
            "figures": [line for r in final_runs(runs) if r.figures for line in organiser_lines(r.stage, r.figures)],
            "logs": logs, "results_dir": str(results.directory)}


def show(site: Site, queue: Queue, entry_id: int, organiser: bool = False) -> dict[str, Any]:
    entry = queue.entry(entry_id)
    runs = queue.stage_runs(entry_id)
    scorings = queue.scorings(entry_id)
    doc: dict[str, Any] = {
        "id": entry.id, "challenge": entry.challenge, "owner": entry.owner, "late": entry.late,
        "submitted_at": entry.submitted_at, "state": entry.state, "stage": entry.stage,
        "outcome": entry.outcome, "failed_stage": entry.failed_stage,
        "reason": entry.reason if entry.state == "done" else None,
        "scores": entry.scores or {}, "exam": entry.exam, "evaluation": entry.evaluation,
        "scorings": [{"at": s.at, "why": s.why, "scorer": s.scorer, "scorer_version": s.scorer_version,
                      "reference_sha256": s.reference_sha256, "results_sha256": s.results_sha256,
                      "scores": s.scores} for s in scorings],
        "report": participant_text(entry, runs, scorings),
        "figures": {r.stage: participant_view(r.stage, r.figures) for r in final_runs(runs) if r.figures}}
    ran = [r.manifest["hardware"] for r in runs if r.manifest and r.manifest.get("hardware")]
    if ran:
        doc["hardware"] = ran[-1]  # where its latest VM stage ran; the exam's says nothing of the labels
    budget = _budget(queue, entry)
    if budget is not None:
        doc["budget"] = budget
        doc["report"] += (f"VM time on this board: {budget['used']} of the {budget['vm_hours']:g} h budget used "
                          f"by {entry.owner}.\n")
    if organiser:
        doc["organiser"] = organiser_details(site, entry, runs)
        doc["organiser"]["events"] = queue.events(entry_id)  # also what `vmjudge gc` removed, and when
        if entry.state == "parked":
            doc["organiser"]["parked_reason"] = entry.reason
    return doc


def _budget(queue: Queue, entry: EntryRow) -> dict[str, Any] | None:
    """The owner's VM-time budget on the entry's board, as a participant may see it: in tenths
    (budget_tenths says why); None when the challenge sets none or is not on this host."""
    try:
        vm_hours = load_challenge(queue.challenge_dir(entry.challenge)).limits.vm_hours
    except VmjudgeError:
        return None
    if vm_hours is None:
        return None
    used = queue.owner_usage(entry.challenge, entry.owner, entry.late).vm_seconds
    return {"vm_hours": vm_hours, "used": budget_tenths(used, vm_hours * 3600)}


def write_html(queue: Queue, site: Site, entry_id: int) -> Path:
    """The participant's report as a page. Entry output in it has its control and bidi characters
    written as visible escapes, as on a terminal: a browser reorders text around U+202E too."""
    doc = show(site, queue, entry_id)
    path = site.layout.results_of(entry_id, make=True).report
    scores = "".join(f"<tr><th>{html.escape(k)}</th><td>{'undefined (0/0)' if v is None else format(v, '.4f')}"
                     "</td></tr>" for k, v in doc["scores"].items())
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>Entry {doc['id']}</title>"
            "<style>body{font-family:sans-serif;max-width:50em;margin:2em auto}pre{background:#f4f4f4;"
            "padding:1em;white-space:pre-wrap}</style></head><body>"
            f"<h1>Entry {doc['id']} — {html.escape(doc['challenge'])}</h1>"
            f"<p>Outcome: <b>{html.escape(str(doc['outcome']))}</b></p>"
            + (f"<table>{scores}</table>" if scores else "")
            + f"<pre>{html.escape(printable(doc['report']))}</pre></body></html>\n")
    return private.write_text(path, page)  # for the organiser to pass on to its owner, no one else


def as_json(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, sort_keys=True)
