"""What a scorer gets and gives. Stage 4 runs on the host only: reference answers never
enter a VM. A scorer is a plain function (or callable) registered under the
`vmjudge.scorers` entry point, or named as "package.module:function" in challenge.toml."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Protocol


@dataclass(frozen=True)
class ExamResults:
    """Stage 3's results for one entry, in the test set's RECORDS order.

    answers: for style "answer-lines", the label the entry gave each record; None when the
    record failed, timed out or has no line (scored as the scorer's "missing" rule).
    files: for style "files", the bytes of the output file each record left; None when the
    record failed, timed out or left no file.
    Exactly one of the two mappings is filled, for every record in `records`.
    """

    records: tuple[str, ...]
    answers: Mapping[str, str | None] | None = None
    files: Mapping[str, bytes | None] | None = None


class Scorer(Protocol):
    def __call__(self, results: ExamResults, reference: Path) -> dict[str, float]:
        """Named scores (e.g. {"score": 0.93, "Se_gross": ...}); `reference` is the challenge's
        reference/ directory. Raise ScoringError (vmjudge.errors) for an unusable reference."""
        ...
