"""A board's chart: each owner's best score over their entries, drawn as SVG on the server (the
CSP lets no script but the portal's run, and the chart needs none) from the participant's board
history (reports/participant.py board_history) alone. The template (chart.html) writes the
elements; this module places them: time across, the best score up, a point per scored entry.
"""

from __future__ import annotations

import calendar
import time
from dataclasses import dataclass
from typing import Any

WIDTH, HEIGHT = 480, 240
LEFT, RIGHT, TOP, BOTTOM = 60, 12, 14, 36  # room for the axes' labels
SERIES = 8  # owners drawn (the board's first, and the one signed in): each has a colour of its own


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    submitted_at: str
    best: float

    @property
    def label(self) -> str:
        return f"best {self.best:.4f} after the entry of {self.submitted_at}"


@dataclass(frozen=True)
class Series:
    owner: str
    css: str  # the colour's class in portal.css
    mine: bool
    points: list[Point]

    @property
    def line(self) -> str:
        """The polyline's points: a step at each entry that raised the best."""
        steps: list[str] = []
        for i, p in enumerate(self.points):
            if i:
                steps.append(f"{p.x:.1f},{self.points[i - 1].y:.1f}")
            steps.append(f"{p.x:.1f},{p.y:.1f}")
        return " ".join(steps)


@dataclass(frozen=True)
class Chart:
    series: list[Series]
    low: float
    high: float
    first: str
    last: str
    shown: int  # owners drawn
    owners: int  # owners on the board
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    top: int = TOP
    right: int = WIDTH - RIGHT
    bottom: int = HEIGHT - BOTTOM


def _seconds(t: str) -> float:
    try:
        return float(calendar.timegm(time.strptime(t, "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return 0.0


def chart(history: list[dict[str, Any]], ranked: list[str], me: str | None,
          lower_first: bool = False) -> Chart | None:
    """The chart of `history`, its owners in the board's order (`ranked`), `me`'s line marked;
    None for a board with no scored entry. The best score is up: on a board whose lower score ranks
    first, the axis runs the other way (Chart.low is the bottom's value, Chart.high the top's)."""
    order = {owner: i for i, owner in enumerate(ranked)}
    chosen = sorted(history, key=lambda h: order.get(h["owner"], len(order)))[:SERIES]
    mine = next((h for h in history if h["owner"] == me), None)
    if mine is not None and mine not in chosen:
        chosen[-1] = mine
    points = [p for h in chosen for p in h["points"]]
    if not points:
        return None
    times = [_seconds(p["submitted_at"]) for p in points]
    bests = [float(p["best"]) for p in points]
    t0, t1, low, high = min(times), max(times), min(bests), max(bests)
    if high - low < 1e-9:
        low, high = low - 0.5, high + 0.5
    span = (high - low) * 0.05
    low, high = low - span, high + span
    if lower_first:
        low, high = high, low

    def place(t: str, best: float) -> tuple[float, float]:
        x = (LEFT + WIDTH - RIGHT) / 2 if t1 == t0 else LEFT + (_seconds(t) - t0) / (t1 - t0) * (WIDTH - RIGHT - LEFT)
        return x, TOP + (high - best) / (high - low) * (HEIGHT - BOTTOM - TOP)

    series = [Series(h["owner"], f"s{i}", h["owner"] == me,
                     [Point(*place(p["submitted_at"], float(p["best"])), p["submitted_at"], float(p["best"]))
                      for p in h["points"]]) for i, h in enumerate(chosen)]
    stamps = sorted(p["submitted_at"] for p in points)
    return Chart(series, low, high, stamps[0], stamps[-1], len(chosen), len(history))
