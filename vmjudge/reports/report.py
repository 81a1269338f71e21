"""Reports: an entry's document for participants (built by participant.py, from its
allow-list, as seen at a moment) and for organisers, who also get every attempt, with
infrastructure failures and their reasons, the manifests, the hashes of what was scored, and
the stage logs (each quoted by its head and tail: the whole log stays on disk).
"""

from __future__ import annotations

import html
import json
import os
from pathlib import Path
from typing import Any

from .. import private
from ..config import Site, load_challenge
from ..errors import VmjudgeError
from ..queue.admit import budget_tenths
from ..queue.db import Queue
from ..queue.rows import EntryRow, Scoring, StageRun, stamp
from ..terminal import printable
from . import participant
from .figures import organiser_lines
from .phase_view import PhaseViews

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
            "figures": [line for r in participant.final_runs(runs) if r.figures
                        for line in organiser_lines(r.stage, r.figures)],
            "logs": logs, "results_dir": str(results.directory), "metrics": _metrics(results.metrics)}


def _metrics(path: Path) -> Any:
    """An evaluation container's metrics.json as it wrote it (bounded by [score] metrics_bytes when it was
    collected); None where there is none, or it cannot be read."""
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None


def show(site: Site, queue: Queue, entry_id: int, organiser: bool = False, at: float | None = None,
         views: PhaseViews | None = None) -> dict[str, Any]:
    """The entry's report: the participant's document as seen `at` (default now; see
    participant.py), at its phase's feedback level then (phase_view.py), or the organiser's,
    whole and at once, with every attempt and log."""
    entry = queue.entry(entry_id)
    runs = queue.stage_runs(entry_id)
    scorings = queue.scorings(entry_id)
    if not organiser:
        return participant.entry_document(_seen(queue, entry, runs, scorings, at, views), _budget(queue, entry))
    doc = participant.entry_document(participant.Seen(entry, runs, scorings), _budget(queue, entry))
    doc["scorings"] = [{"at": s.at, "why": s.why, "scorer": s.scorer, "scorer_version": s.scorer_version,
                        "reference_sha256": s.reference_sha256, "results_sha256": s.results_sha256,
                        "scores": s.scores} for s in scorings]
    doc["published"] = stamp(entry.published) if entry.published is not None else None
    doc["organiser"] = organiser_details(site, entry, runs)
    doc["organiser"]["events"] = queue.events(entry_id)  # also what `vmjudge gc` removed, and when
    if entry.state == "parked":
        doc["organiser"]["parked_reason"] = entry.reason
    return doc


def report_page(queue: Queue, entry_id: int, views: PhaseViews | None = None) -> dict[str, Any]:
    """The portal's report page as the participant sees it now: show()'s document and each stage
    as a step (participant.report_page)."""
    entry = queue.entry(entry_id)
    seen = _seen(queue, entry, queue.stage_runs(entry_id), queue.scorings(entry_id), None, views)
    return participant.report_page(seen, _budget(queue, entry))


def _seen(queue: Queue, entry: EntryRow, runs: list[StageRun], scorings: list[Scoring], at: float | None,
          views: PhaseViews | None) -> participant.Seen:
    """The entry as participants see it `at` (default now), at its phase's feedback level then."""
    at = participant.now() if at is None else at
    feedback = (views or PhaseViews.load(queue)).feedback(entry, at)
    return participant.Seen.at(entry, runs, scorings, at, feedback)


def _budget(queue: Queue, entry: EntryRow) -> dict[str, Any] | None:
    """The owner's VM-time budget on the entry's board, as a participant may see it: in tenths
    (budget_tenths says why); None when the challenge sets none or is not on this host."""
    try:
        vm_hours = load_challenge(queue.challenge_dir(entry.challenge)).in_phase(entry.phase).limits.vm_hours
    except VmjudgeError:
        return None
    if vm_hours is None:
        return None
    used = queue.owner_usage(entry.challenge, entry.owner, entry.late, entry.phase).vm_seconds
    return {"vm_hours": vm_hours, "used": budget_tenths(used, vm_hours * 3600)}


def write_html(queue: Queue, site: Site, entry_id: int) -> Path:
    """The participant's report as a page, as it reads once published (the organiser passes
    it on; the daemon writes it when the entry ends, before the publish time): once its exam's
    publish time has come, at its phase's feedback level now (`vmjudge publish` writes the
    phase's pages again). Entry output in it has its control and bidi characters written as
    visible escapes, as on a terminal: a browser reorders text around U+202E too."""
    doc = show(site, queue, entry_id, at=participant.AS_PUBLISHED)
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
