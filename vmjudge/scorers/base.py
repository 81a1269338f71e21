"""What a scorer gets and gives. Stage 4 runs on the host only: reference answers never
enter a VM. A scorer is a plain function (or callable) registered under the
`vmjudge.scorers` entry point, or named as "package.module:function" in challenge.toml."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from ..queue.results import ExamResults


class Scorer(Protocol):
    def __call__(self, results: ExamResults, reference: Path) -> dict[str, float]:
        """Named scores (e.g. {"score": 0.93, "Se_gross": ...}); `reference` is the challenge's
        reference/ directory. Raise ScoringError (vmjudge.errors) for an unusable reference."""
        ...
