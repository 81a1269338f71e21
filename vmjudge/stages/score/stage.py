"""Stage 4, score: on the host only; the reference answers never enter a VM."""

from __future__ import annotations

import base64
import json

from ...errors import InfrastructureError, ScoringError
from ..context import StageContext, StageOutcome
from ..exam.stage import RESULTS_FILE
from . import load_scorer, scorer_version
from .base import ExamResults


def load_results(path) -> ExamResults:
    archive = json.loads(path.read_text())
    records = tuple(archive["records"])
    if archive["style"] == "files":
        files = {r: (base64.b64decode(v) if v is not None else None) for r, v in archive["files"].items()}
        return ExamResults(records=records, files=files)
    return ExamResults(records=records, answers=dict(archive["answers"]))


def run(ctx: StageContext) -> StageOutcome:
    ch = ctx.challenge
    path = ctx.results_dir / RESULTS_FILE
    try:
        results = load_results(path)
        scores = load_scorer(ch.scorer)(results, ch.reference_dir)
    except (ScoringError, FileNotFoundError, ValueError, KeyError) as exc:
        # Not the entry's fault: the organiser must fix the reference or the scorer.
        raise InfrastructureError("scoring-error", f"scoring failed: {exc}")
    scores = {k: float(v) for k, v in scores.items()}
    shown = ", ".join(f"{k} {v:.4f}" for k, v in scores.items())
    manifest = {"stage": "score", "scorer": ch.scorer, "scorer_version": scorer_version(ch.scorer),
                "results_file": RESULTS_FILE}
    return StageOutcome("scored", f"Scores: {shown}.", scores=scores, manifest=manifest)
