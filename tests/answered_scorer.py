"""A challenge scorer for the benchmarks' challenges (bench/container.py, bench/case_overhead.py), which measure
the stages, not answers: the share of test records that left their results, in any style."""

from __future__ import annotations


def score(results, reference):
    left = results.answers or results.files or results.rows or \
        {r: (None if not outs or any(v is None for v in outs.values()) else b"") for r, outs in
         (results.outputs or {}).items()}
    answered = sum(1 for r in results.records if left.get(r) is not None)
    return {"answered": float(answered), "score": answered / len(results.records) if results.records else 0.0}
