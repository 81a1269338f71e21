"""Stage 4, score: on the host; the reference answers never enter an entry's VM. It scores the
entry's archived stage-3 results through scoring.ScoringRules, as `vmjudge rescore` does, or in a VM
of its own: by the organiser's evaluation container (container.py), or by the challenge's scorer
file ([score] isolate = true, isolated.py)."""

from __future__ import annotations

from ...errors import AnswerError, ArchiveError, ConfigError, InfrastructureError, ScoringError
from ..context import StageContext, StageOutcome
from . import container, isolated
from .scoring import ScoringRules, undefined_note


def run(ctx: StageContext) -> StageOutcome:
    ch = ctx.challenge
    if ctx.archived is None:
        raise InfrastructureError("results-missing", f"entry {ctx.entry.id} has no archived stage-3 results to "
                                  "score: run it again with `vmjudge rescore --rerun-stages`.")
    if ch.scored_in_vm:
        return in_vm(ctx)
    try:
        scoring = ScoringRules.load(ch.scorer, ch.reference_dir, ch.score_options).score(
            ctx.site.home, ctx.entry.id, ctx.archived, "official")
    except AnswerError as exc:  # the entry's own answers, which the official scorer refuses
        return StageOutcome("failed", f"{exc} Entry not scored.", reason="invalid-answer",
                            manifest={"stage": "score", "refused_answer": exc.detail})
    except (ScoringError, ConfigError, ArchiveError) as exc:
        # Not the entry's fault: the organiser must fix the reference, the scorer or the archive.
        raise InfrastructureError("scoring-error", f"scoring failed: {exc}") from exc
    shown = ", ".join(f"{k} {'undefined' if v is None else format(v, '.4f')}" for k, v in scoring.scores.items())
    manifest = {"stage": "score", "scorer": scoring.scorer, "scorer_version": scoring.scorer_version,
                "reference_sha256": scoring.reference_sha256, "results_sha256": scoring.results_sha256}
    note = undefined_note(scoring.scores, ch.score_options)
    return StageOutcome("scored", f"Scores: {shown}.{note}", scores=scoring.scores, manifest=manifest, scoring=scoring)


def in_vm(ctx: StageContext, why: str = "official") -> StageOutcome:
    """Stage 4 (or a rescore, `why` "rescore") in a VM: the evaluation container, or the isolated scorer."""
    return container.run(ctx, why) if ctx.challenge.evaluation is not None else isolated.run(ctx, why)
