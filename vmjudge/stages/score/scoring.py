"""Scoring archived stage-3 results: the one code path of stage 4 and of `vmjudge rescore`.

The scorer, its version and the reference's hash are settled once per run (a rescore of a
thousand entries reads the reference hash once); each scoring then names exactly what it
used, so a number can always be traced and computed again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from ...config import ScoreOptions
from ...errors import ScoringError
from ...queue import results
from ...queue.rows import Scoring
from ...scorers.base import Scorer
from ...scorers.loader import load_scorer, scorer_version
from ...scorers.reference import reference_sha256


@dataclass(frozen=True)
class ScoringRules:
    """A scorer and a reference directory, ready to score any number of entries."""

    scorer: str
    scorer_version: str
    reference: Path
    reference_sha256: str
    function: Scorer

    @classmethod
    def load(cls, scorer: str, reference: Path, options: ScoreOptions | None = None) -> ScoringRules:
        """Raises ConfigError for a scorer that cannot be loaded, ScoringError for a missing
        reference. `options` are the challenge's [score] choices (built-in scorers only)."""
        function = load_scorer(scorer, options)
        return cls(scorer=scorer, scorer_version=scorer_version(scorer, options), reference=Path(reference),
                   reference_sha256=reference_sha256(reference), function=function)

    def score(self, home: Path, entry_id: int, results_sha256: str, why: str) -> Scoring:
        """Score the archived results `results_sha256`. Raises ArchiveError when they are
        missing or damaged, AnswerError when the entry gave answers the official scorer
        refuses, ScoringError when the reference or the scorer is at fault. A part may be
        None (0/0 where the official code gives NaN); "score", which ranks, may not."""
        scores = named_scores(self.scorer, self.function(results.load(home, results_sha256), self.reference))
        return Scoring(entry_id=entry_id, why=why, scorer=self.scorer, scorer_version=self.scorer_version,
                       reference_sha256=self.reference_sha256, results_sha256=results_sha256, scores=scores)


def named_scores(scorer: str, raw: object) -> dict[str, float | None]:
    """What a scorer returned, as scores: a dict of finite numbers by name, "score" among them (a part
    other than score may be None); ScoringError naming the scorer for anything else."""
    if not isinstance(raw, dict) or not raw or "score" not in raw:
        raise ScoringError(f"The scorer {scorer} returned {repr(raw)[:200]}, not a dict of named scores with score "
                           "among them: it must return e.g. {\"score\": 0.9}.")
    scores: dict[str, float | None] = {}
    for name, value in raw.items():
        if value is None and name != "score":
            scores[name] = None
            continue
        if not isinstance(name, str) or isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value if isinstance(value, float) else _as_float(value)):
            raise ScoringError(f"The scorer {scorer} returned {repr(name)[:80]}: {repr(value)[:80]}; every score must "
                               "be a finite number under a name (a part other than score may be None).")
        scores[name] = float(value)
    return scores


def undefined_note(scores: dict[str, float | None], options: ScoreOptions) -> str:
    """The report's sentence on parts that are 0/0 (null), saying how score dealt with them;
    "" when every part is a number."""
    missing = [name for name, value in scores.items() if value is None]
    if not missing:
        return ""
    how = ("left out of score, which averages the parts that are defined" if options.undefined == "omit"
           else "counted as 0 in score")
    return (f" {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} undefined (0/0: the test set has no "
            f"record of that kind, where the official scoring code gives NaN), {how} (challenge.toml [score] "
            f"undefined = \"{options.undefined}\").")


def _as_float(value: int) -> float:
    """An int as a float; inf for one too large for a float, which then fails the finite test."""
    try:
        return float(value)
    except OverflowError:
        return math.inf
