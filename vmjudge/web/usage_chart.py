"""A training case's use over time as a small SVG chart of two panels, drawn on the server like the
board's (chart.py): its memory against the memory the entry may hold, and its CPU use (CPU seconds
per second) against the VM's vCPUs; on a GPU stage a third, the card's memory in use against the
card's. Made from the quiz's figures in the participant's page document
(reports/participant.py lets samples through for training cases only, never the exam's); the
template (usage_chart.html) writes the elements, escaped, and this module only places them.

Bounded whatever the document holds: at most MAX_SAMPLES points a case and MAX_CHARTS cases a page
(the rest are in the report's table without a chart); a sample that is not three (or, with the
GPU's memory, four) finite numbers from 0 to 2**62, later than the one before, is left out.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..reports.figures import seconds, size

WIDTH, PANEL, GAP = 320, 70, 26  # the chart's width, each panel's height, the room between them
LEFT, RIGHT, TOP, BOTTOM = 64, 8, 16, 20
MAX_SAMPLES = 120  # points of one case: the host's own bound (vm/samples.py)
MAX_CHARTS = 40  # cases drawn on one page
MAX_RATE = 4096.0  # CPU seconds per second drawn at most: more vCPUs than any VM has


@dataclass(frozen=True)
class Panel:
    title: str  # "Memory", "CPU", "GPU memory"
    top: float  # its plot's top and bottom, in the SVG's units
    bottom: float
    line: str  # the polyline's points
    limit_y: float | None  # where the limit's line is, None when unknown
    limit_words: str  # "limit 1.8 GiB", "2 vCPUs"
    high_words: str  # the axis' top


@dataclass(frozen=True)
class UsageChart:
    key: str  # unique on the page: the record's place in the quiz's table
    record: str
    panels: tuple[Panel, ...]
    duration: str
    summary: str  # what it shows in words: the chart's description and its text alternative
    what: str = "memory and CPU"  # the panels, in the chart's title
    width: int = WIDTH
    left: int = LEFT
    right: int = WIDTH - RIGHT

    @property
    def height(self) -> int:
        return TOP + len(self.panels) * (PANEL + GAP) - GAP + BOTTOM


Point = tuple[float, float, float, float | None]  # seconds, CPU seconds, memory, GPU memory (None: not read)


def clean(samples: Any) -> list[Point]:
    """The document's samples that can be drawn: at most MAX_SAMPLES, each sane, in time order."""
    out: list[Point] = []
    for item in samples[:MAX_SAMPLES] if isinstance(samples, list) else []:
        if not isinstance(item, list) or len(item) not in (3, 4) or not all(_number(v, 0) is not None for v in item):
            continue
        if out and item[0] <= out[-1][0]:
            continue
        out.append((float(item[0]), float(item[1]), float(item[2]), float(item[3]) if len(item) == 4 else None))
    return out


def _rates(points: list[Point]) -> list[tuple[float, float, float]]:
    """CPU seconds per second over each span between samples, as (from, to, rate); the cgroup's count
    starts at 0 with the command, so the first span runs from its start."""
    spans, t0, c0 = [], 0.0, 0.0
    for t, c, *_ in points:
        if t - t0 >= 1e-3:  # the guest's resolution: a finer span is no rate
            spans.append((t0, t, min(max(c - c0, 0.0) / (t - t0), MAX_RATE)))
            t0, c0 = t, c
    return spans


def _scale(top: float, high: float) -> Callable[[float], float]:
    """A panel's y for a value, from its bottom (0) to its top (`high`, or more: drawn at the top)."""
    return lambda v: top + PANEL - min(v / high, 1.0) * PANEL


def _vcpus(vcpus: float | None) -> str:
    return f"{vcpus:g} vCPU{'' if vcpus == 1 else 's'}" if vcpus else "vCPUs unknown"


def usage_chart(key: str, record: str, samples: Any, memory_limit: Any, vcpus: Any,
                gpu_memory: Any = None) -> UsageChart | None:
    """The chart of one case; None when it has no sample that can be drawn."""
    points, memory_limit, vcpus = clean(samples), _number(memory_limit), _number(vcpus)
    if not points:
        return None
    end = max(points[-1][0], 1e-3)

    def x(t: float) -> float:
        return LEFT + t / end * (WIDTH - RIGHT - LEFT)

    memory, mem_peak = _memory_panel("Memory", TOP, [(t, m) for t, _, m, _ in points], memory_limit, x)
    spans = _rates(points)
    busiest = max((r for _, _, r in spans), default=0.0)
    cpu_high = max(busiest, vcpus or 0.0) * 1.05 or 1.0
    cpu_top = TOP + PANEL + GAP
    cpu_y = _scale(cpu_top, cpu_high)
    cpu = Panel("CPU", cpu_top, cpu_top + PANEL,
                " ".join(f"{x(a):.1f},{cpu_y(r):.1f} {x(b):.1f},{cpu_y(r):.1f}" for a, b, r in spans),
                cpu_y(vcpus) if vcpus else None, _vcpus(vcpus), f"{cpu_high:.2f}")
    t, c, *_ = points[-1]
    summary = (f"Memory up to {size(mem_peak)} of {_of(memory_limit)}; "
               f"CPU {c / t if t else 0.0:.2f} on average and at most {busiest:.2f} of {_vcpus(vcpus)}; ")
    on_card = [(t, g) for t, _, _, g in points if g is not None]
    if not on_card:
        return UsageChart(key, record, (memory, cpu), seconds(t), f"{summary}{len(points)} samples over {seconds(t)}.")
    card_limit = _number(gpu_memory)
    card, card_peak = _memory_panel("GPU memory", cpu_top + PANEL + GAP, on_card, card_limit, x)
    return UsageChart(key, record, (memory, cpu, card), seconds(t),
                      f"{summary}GPU memory up to {size(card_peak)} of {_of(card_limit)}; "
                      f"{len(points)} samples over {seconds(t)}.", "memory, CPU and GPU memory")


def _memory_panel(title: str, top: float, points: list[tuple[float, float]], limit: float | None,
                  x: Callable[[float], float]) -> tuple[Panel, float]:
    """A panel of bytes over time against their limit (the entry's memory, the card's), and the peak."""
    peak = max(m for _, m in points)
    high = max(peak, limit or 0.0) * 1.05 or 1.0
    y = _scale(top, high)
    return Panel(title, top, top + PANEL, " ".join(f"{x(t):.1f},{y(m):.1f}" for t, m in points),
                 y(limit) if limit else None, f"limit {size(limit)}" if limit else "limit unknown", size(high)), peak


def _of(limit: float | None) -> str:
    return size(limit) if limit else "an unknown limit"


def usage_charts(view: dict[str, Any]) -> tuple[list[UsageChart], int]:
    """The quiz's charts (at most MAX_CHARTS, in the table's order) and how many cases have samples."""
    records = view.get("records")
    sampled = [(i, r) for i, r in enumerate(records if isinstance(records, list) else [])
               if isinstance(r, dict) and r.get("samples")]
    charts = [usage_chart(f"usage-{i}", str(r.get("record")), r["samples"], view.get("memory_limit"), view.get("vcpus"),
                          view.get("gpu_memory")) for i, r in sampled[:MAX_CHARTS]]
    return [c for c in charts if c is not None], len(sampled)


def _number(value: Any, least: float = 1e-9) -> float | None:
    """A finite number from `least` to 2**62 (the host's bound on every figure), else None."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok and least <= value <= 1 << 62 else None
