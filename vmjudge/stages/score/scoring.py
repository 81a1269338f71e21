"""Scoring archived stage-3 results: the one code path of stage 4 and of `vmjudge rescore`.

The scorer, its version and the reference's hash are settled once per run (a rescore of a
thousand entries reads the reference hash once); each scoring then names exactly what it
used, so a number can always be traced and computed again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from ... import results_store
from ...errors import ArchiveError, ScoringError
from ...queue.db import ArchivedResults, Queue, Scoring
from ..exam.stage import LEGACY_RESULTS_FILE
from . import Scorer, load_scorer, reference_sha256, scorer_version


@dataclass(frozen=True)
class ScoringRules:
    """A scorer and a reference directory, ready to score any number of entries."""

    scorer: str
    scorer_version: str
    reference: Path
    reference_sha256: str
    function: Scorer

    @classmethod
    def load(cls, scorer: str, reference: Path) -> "ScoringRules":
        """Raises ConfigError for a scorer that cannot be loaded, ScoringError for a missing reference."""
        function = load_scorer(scorer)
        return cls(scorer=scorer, scorer_version=scorer_version(scorer), reference=Path(reference),
                   reference_sha256=reference_sha256(reference), function=function)

    def score(self, home: Path, entry_id: int, results_sha256: str, why: str) -> Scoring:
        """Score the archived results `results_sha256`. Raises ArchiveError when they are
        missing or damaged, ScoringError when the reference or the scorer is at fault."""
        results = results_store.load(home, results_sha256)
        raw = self.function(results, self.reference)
        if not isinstance(raw, dict) or not raw:
            raise ScoringError(f"The scorer {self.scorer} returned {type(raw).__name__}, not a dict of named "
                               "scores: it must return e.g. {\"score\": 0.9}.")
        scores: dict[str, float] = {}
        for name, value in raw.items():
            if not isinstance(name, str) or isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value):
                raise ScoringError(f"The scorer {self.scorer} returned {name!r}: {value!r}; every score must be a "
                                   "finite number under a name.")
            scores[name] = float(value)
        return Scoring(entry_id=entry_id, why=why, scorer=self.scorer, scorer_version=self.scorer_version,
                       reference_sha256=self.reference_sha256, results_sha256=results_sha256, scores=scores)


def archived_results(queue: Queue, home: Path, entry_id: int) -> ArchivedResults | None:
    """The entry's latest archived stage-3 results. A home made before the results store
    kept them as results/ID/exam-results.json: those are archived (and linked) on first use."""
    found = queue.exam_results(entry_id)
    if found is not None:
        return found
    legacy = Path(home) / "results" / str(entry_id) / LEGACY_RESULTS_FILE
    if not legacy.is_file():
        return None
    data = legacy.read_bytes()
    try:
        results_store.decode(data)  # refuse to archive what could not be scored
    except (ValueError, KeyError, TypeError) as exc:
        raise ArchiveError(f"{legacy} cannot be read ({type(exc).__name__}: {exc}): run the entry again with "
                           "--rerun-stages.") from exc
    digest = results_store.put(home, data)
    exam_runs = [r for r in queue.stage_runs(entry_id) if r.stage == "exam" and r.status == "passed"]
    run = exam_runs[-1] if exam_runs else None
    queue.add_exam_results(entry_id, run.id if run else None, digest,
                           {**(run.manifest or {}), "imported_from": str(legacy)} if run else
                           {"imported_from": str(legacy)})
    return queue.exam_results(entry_id)
