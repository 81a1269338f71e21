"""A command's use over time as the host keeps it: the samples of its cgroup the guest took while it
ran (images/guest/samples.py), sent in its end frame's usage as [[seconds, cpu_seconds, memory_bytes], ...],
on a GPU stage with the card's memory in use as a fourth figure where NVML answered.

The guest is not trusted to keep them sane or small. The host keeps at most MAX_SAMPLES of a command,
each three or four finite numbers from 0 to 2**62, its time after the one before and its CPU seconds no
fewer; any other sample is dropped, never an error that fails a run (they are measurements, as the other
figures). And at most RUN_SAMPLES in one run, all its commands together: a stage of thousands of
records keeps a few MiB of them at most, the later commands none once it is spent.
"""

from __future__ import annotations

import math
from typing import Any

MAX_SAMPLES = 120  # of one command: the guest's own limit
RUN_SAMPLES = 120 * 256  # of one run's commands together

Sample = tuple[float, ...]  # seconds, CPU seconds, memory bytes(, GPU memory bytes)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if math.isfinite(value) and 0 <= value <= 1 << 62 else None


def read_samples(usage: Any, room: int = MAX_SAMPLES) -> tuple[Sample, ...] | None:
    """The samples of an end frame's `usage` the host keeps, at most `room` of them; None when it
    sends none (root's commands, older agents) or none is sane."""
    given = usage.get("samples") if isinstance(usage, dict) else None
    if not isinstance(given, list):
        return None
    kept: list[Sample] = []
    for item in given[:MAX_SAMPLES]:
        if len(kept) >= room:
            break
        if not isinstance(item, list) or len(item) not in (3, 4):
            continue
        sample = tuple(v for v in map(_number, item) if v is not None)
        if len(sample) != len(item):
            continue
        if kept and (sample[0] <= kept[-1][0] or sample[1] < kept[-1][1]):
            continue
        kept.append(sample)
    return tuple(kept) or None
