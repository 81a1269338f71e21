"""The arithmetic of a score's parts, shared by the built-in scorers so that an empty class
or a 0/0 part is treated the same way everywhere (and as [score] undefined says)."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from vmjudge.config import ScoreOptions


def ratio(numerator: float, denominator: float) -> float:
    """numerator/denominator, with 0/0 taken as 0: an empty class must not crash a score."""
    return float(numerator) / denominator if denominator else 0.0


def part(numerator: float, denominator: float) -> float | None:
    """numerator/denominator; None for 0/0, where the official code gives NaN: such a part is
    reported as null and [score] undefined decides what it does to `score`."""
    return float(numerator) / denominator if denominator else None


def mean_of_parts(values: Sequence[float | Fraction | None], options: ScoreOptions) -> float | Fraction:
    """The mean of a score's parts. undefined = "omit": of the defined parts only (0 when none
    is); "zero": an undefined part counts as 0."""
    if options.undefined == "zero":
        return sum(v or 0.0 for v in values) / len(values)
    defined = [v for v in values if v is not None]
    return sum(defined) / len(defined) if defined else 0.0
