"""A challenge as participants may know it (issue 58): what the portal's page of it and GET
/api/challenges/NAME show, through participant.CHALLENGE.

Everything here is what a participant reads before the first upload and nothing of an entry: the
entry's kind and rules, the stages' limits, the runtime written by the judge from its image's
manifest, the phases as phase_view.py lets them be seen now, the scorer and which way it ranks, and
the downloads the organiser offers (made by replica/downloads.py: the caller passes what is kept).
"""

from __future__ import annotations

import importlib
from typing import Any

from ..config import Challenge, Site
from ..errors import VmjudgeError
from ..images.build import find_image
from ..images.runtime import describe_runtime
from .participant import LEAF, PHASE
from .phase_view import PhaseViews, phases_document

# The allow-lists: the page's and GET /api/challenges/NAME's, and GET /api/challenges'.
DOWNLOAD = {"what": LEAF, "url": LEAF, "name": LEAF, "size": LEAF, "sha256": LEAF, "making": LEAF}
CHALLENGE = {"name": LEAF, "phase": LEAF, "kind": LEAF, "entry": LEAF, "required": [LEAF], "max_size": LEAF,
             "max_scored_per_owner": LEAF, "submissions_per_hour": LEAF, "pending_per_owner": LEAF,
             "vm_hours": LEAF, "runtime": [LEAF], "phases": [PHASE], "scorer": LEAF, "scorer_meaning": LEAF,
             "order": LEAF, "board": LEAF,
             "downloads": {"signed_in_only": LEAF, "files": [DOWNLOAD], "replica_command": LEAF}}
CHALLENGE_LIST = {"challenges": [{"name": LEAF, "kind": LEAF, "phases": [LEAF], "url": LEAF}]}
BUILTIN_SCORERS = ("accuracy", "af2017", "alarms2015", "beats2014", "cindex", "dice", "heart2016",
                   "youth_mental_health")
KINDS = {"archive": "an archive of setup.sh, next.sh and the files they need (PhysioNet's way)",
         "container": "a container image (Grand Challenge's way)",
         "submission": "a submission.zip whose main.py writes the submission (DrivenData's way)"}


def challenge_row(ch: Challenge) -> dict[str, Any]:
    """The challenge in the home page's list and GET /api/challenges."""
    return {"name": ch.name, "kind": ch.entry.kind, "phases": [p.name for p in ch.phases],
            "url": f"/challenges/{ch.name}"}


def scorer_meaning(ch: Challenge) -> str:
    """What a score means: the built-in scorer's own first paragraph, or the organiser's
    evaluation's columns. An organiser's own scorer file is not imported here (its code would run
    in the portal): its description is the organiser's to write on the page."""
    if ch.evaluation is not None:
        return "Computed by the organisers' evaluation method (a container image) from every case's outputs."
    if ch.scorer in BUILTIN_SCORERS:
        doc = importlib.import_module(f"vmjudge.scorers.builtin.{ch.scorer}").__doc__ or ""
        return " ".join(doc.strip().split("\n\n", 1)[0].split())
    return "Computed by the organisers' own scorer: the description above says what it measures."


def runtime_lines(site: Site, ch: Challenge) -> list[str] | None:
    """The runtime written by the judge, or None while its image is not built on this host."""
    try:
        image = find_image(site, ch.image)
    except VmjudgeError:
        return None
    return describe_runtime(ch, image.manifest, site).lines()


def challenge_document(site: Site, ch: Challenge, views: PhaseViews, at: float,
                       downloads: dict[str, Any]) -> dict[str, Any]:
    entry, lim = ch.entry, ch.limits
    return {
        "name": ch.name, "phase": ch.phase.name if ch.phase is not None else None,
        "kind": entry.kind, "entry": KINDS.get(entry.kind, entry.kind),
        "required": list(entry.required) if entry.kind == "archive" else [],
        "max_size": entry.max_size, "max_scored_per_owner": entry.max_scored_per_owner,
        "submissions_per_hour": lim.submissions_per_hour,
        "pending_per_owner": lim.pending_per_owner, "vm_hours": lim.vm_hours,
        "runtime": runtime_lines(site, ch),
        "phases": phases_document(views, ch.name, at)["phases"],
        "scorer": ch.scorer if ch.evaluation is None else "evaluation container",
        "scorer_meaning": scorer_meaning(ch), "order": "lower first" if ch.lower_first else "higher first",
        "board": f"/leaderboards/{ch.name}", "downloads": downloads,
    }
