"""Stage 4, score: on the host; the reference answers never enter an entry's VM. It scores the
entry's archived stage-3 results through scoring.ScoringRules, as `vmjudge rescore` does, or in a VM
of its own: by the organiser's evaluation container (container.py), or by the challenge's scorer
file ([score] isolate = true, isolated.py)."""

from __future__ import annotations

import logging

from ...errors import AnswerError, ArchiveError, ChallengeError, ConfigError, InfrastructureError, ScoringError
from ..context import StageContext, StageOutcome
from . import container, isolated
from .scoring import ScoringRules, undefined_note

log = logging.getLogger(__name__)


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
    except ArchiveError as exc:  # the judge's own store: run again, as any infrastructure failure
        raise InfrastructureError("results-missing", f"scoring failed: {exc}") from exc
    except Exception as exc:
        # The challenge's scorer or reference, never the entry: the same scoring would fail again, so the
        # entry is held at once, the organisers told, and `vmjudge rescore` scores it once it is fixed.
        log.error("entry %d: the scorer %s failed on its results", ctx.entry.id, ch.scorer, exc_info=True)
        said = str(exc) if isinstance(exc, (ScoringError, ConfigError)) else f"{type(exc).__name__}: {exc}."
        raise ChallengeError("scoring-error", f"the scorer {ch.scorer} failed on this entry's results: {said} Fix "
                             "the scorer or the reference, then `vmjudge rescore` scores it.") from exc
    shown = ", ".join(f"{k} {'undefined' if v is None else format(v, '.4f')}" for k, v in scoring.scores.items())
    manifest = {"stage": "score", "scorer": scoring.scorer, "scorer_version": scoring.scorer_version,
                "reference_sha256": scoring.reference_sha256, "results_sha256": scoring.results_sha256}
    note = undefined_note(scoring.scores, ch.score_options)
    return StageOutcome("scored", f"Scores: {shown}.{note}", scores=scoring.scores, manifest=manifest, scoring=scoring)


def in_vm(ctx: StageContext, why: str = "official") -> StageOutcome:
    """Stage 4 (or a rescore, `why` "rescore") in a VM: the evaluation container, or the isolated scorer."""
    return container.run(ctx, why) if ctx.challenge.evaluation is not None else isolated.run(ctx, why)
