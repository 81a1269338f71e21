"""The leaderboard: each owner's best scored entry, ranked by its "score", highest first or, for
a challenge whose order is "lower" (Challenge.lower_first), lowest first; a tie goes to the
earlier submission. Late entries are ranked on a board of their own and never on the
official one, and each phase of a contest has boards of its own.

A board shown to participants counts an entry only from its publish time (participant.py):
a row appearing the moment an exam ends would time the exam. Its rows carry what
participant.BOARD_ROW allows; the exam's host and hardware are the organiser's.

Boards are written as text, JSON, CSV or a self-contained HTML page. The page is meant to be
copied to any web server as it is: inline CSS only, no script, no external asset, a
Content-Security-Policy that forbids loading anything, and every value escaped, since owner
names are whatever submitters called themselves.
"""

from __future__ import annotations

import csv
import html
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import VmjudgeError
from ..files import durable_write
from ..queue.boards import PRIMARY, best_entries, scored_entries
from ..queue.db import Queue
from ..queue.rows import EntryRow
from ..vm.hardware import line as hardware_line


@dataclass(frozen=True)
class Row:
    rank: int
    owner: str
    entry_id: int
    score: float
    submitted_at: str
    scores: dict[str, float | None] = field(default_factory=dict)  # every field the scorer returned
    # Where its exam ran (the queue's host name) and on what (vm/hardware.py), so that an
    # organiser sees whether two entries ran on like hardware; None for a home older than that.
    exam_host: str | None = None
    exam_hardware: dict[str, Any] | None = None


def leaderboard(queue: Queue, challenge: str, late: bool = False, at: float | None = None,
                phase: str | None = None, lower_first: bool = False) -> list[Row]:
    """The board as participants see it `at` (an entry counts from its publish time on:
    participant.py), or, with `at` None, the organiser's, with every scored entry at once. In a
    contest, the board of one phase: its entries alone (whether participants may see it at
    all is phase_view.py's to say)."""
    best: dict[str, tuple[tuple[float, str, int], EntryRow]] = {}
    sign = 1.0 if lower_first else -1.0
    for e in best_entries(queue.database, challenge, late, phase, at, lower_first):  # one per owner, chosen in SQL
        key = (sign * float((e.scores or {}).get(PRIMARY) or 0.0), e.submitted_at, e.id)
        best[e.owner] = (key, e)
    ordered = sorted(best.values(), key=lambda ke: ke[0])
    exams = queue.last_passed([e.id for _key, e in ordered], "exam")
    rows = []
    for i, (_key, e) in enumerate(ordered):
        exam = exams.get(e.id)
        rows.append(Row(rank=i + 1, owner=e.owner, entry_id=e.id, score=float((e.scores or {}).get(PRIMARY) or 0.0),
                        submitted_at=e.submitted_at, scores=dict(e.scores or {}),
                        exam_host=exam.host if exam else None,
                        exam_hardware=(exam.manifest or {}).get("hardware") if exam else None))
    return rows


def history(queue: Queue, challenge: str, late: bool = False, at: float | None = None,
            phase: str | None = None, lower_first: bool = False) -> dict[str, list[tuple[str, float]]]:
    """How the board came to be: each owner's counted entries in the order submitted, each with
    the owner's best score once it was in (a point per scored entry; the portal's chart)."""
    out: dict[str, list[tuple[str, float]]] = {}
    for e in scored_entries(queue.database, challenge, late, phase, at):  # in the order submitted
        points = out.setdefault(e.owner, [])
        score = float((e.scores or {}).get(PRIMARY) or 0.0)
        better = min if lower_first else max
        points.append((e.submitted_at, better(score, points[-1][1]) if points else score))
    return out


def exam_lines(rows: list[Row]) -> list[str]:
    """The organiser's text board ends with where each row's exam ran and on what guest CPU, so
    that two entries judged on unlike machines (or instruction sets) are seen side by side."""
    return [f"entry {r.entry_id} ({r.owner}) exam: " + (hardware_line(r.exam_hardware) if r.exam_hardware
                                                        else f"judged on {r.exam_host or 'an unrecorded host'}")
            for r in rows]


def columns(rows: list[Row]) -> list[str]:
    """The score fields shown: the primary one first, then the others in the scorer's order."""
    names = [PRIMARY]
    for r in rows:
        names += [k for k in r.scores if k not in names]
    return names


def _value(row: Row, name: str) -> str:
    value = row.score if name == PRIMARY else row.scores.get(name)
    return "" if value is None else f"{value:.4f}"


def title(challenge: str, late: bool, phase: str | None = None) -> str:
    return f"{challenge} {f'phase {phase} ' if phase else ''}{'late ' if late else ''}leaderboard"


def as_text(challenge: str, rows: list[Row], late: bool = False, phase: str | None = None) -> str:
    names = columns(rows)
    widths = [max(8, len(n)) for n in names]
    head = title(challenge, late, phase)
    lines = [head, "=" * len(head),
             "  ".join([f"{'rank':>4}", *(f"{n:>{w}}" for n, w in zip(names, widths, strict=True)), f"{'entry':>6}",
                        "owner"])]
    lines += ["  ".join([f"{r.rank:>4}", *(f"{_value(r, n):>{w}}" for n, w in zip(names, widths, strict=True)),
                         f"{r.entry_id:>6}", r.owner]) for r in rows]
    if not rows:
        lines.append("(no scored entries yet)")
    return "\n".join(lines) + "\n"


def as_csv(rows: list[Row]) -> str:
    """One row per owner; scores with full precision, so a spreadsheet can re-rank them."""
    names = columns(rows)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["rank", "owner", "entry", "submitted_at", *names])
    for r in rows:
        writer.writerow([r.rank, _cell(r.owner), r.entry_id, r.submitted_at,
                         *(r.score if n == PRIMARY else r.scores.get(n, "") for n in names)])
    return out.getvalue()


def _cell(text: str) -> str:
    """Owners choose their own names: one starting like a formula (=, +, -, @) would run as
    one in the organiser's spreadsheet, so it is quoted as text (OWASP's CSV-injection rule)."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


_CSS = ("body{font-family:sans-serif;max-width:60em;margin:2em auto;padding:0 1em;color:#222}"
        "table{border-collapse:collapse;width:100%}th,td{padding:.3em .6em;border-bottom:1px solid #ddd}"
        "th{text-align:left;background:#f4f4f4}.num{text-align:right;font-variant-numeric:tabular-nums}"
        "tbody tr:first-child{font-weight:bold}caption{text-align:left;color:#666;padding:.5em 0}")


def as_html(challenge: str, rows: list[Row], late: bool = False, generated_at: str = "", phase: str | None = None
            ) -> str:
    e = html.escape
    names = columns(rows)
    head = "".join(f"<th scope='col'{cls}>{e(h)}</th>" for h, cls in
                   [("Rank", " class='num'"), ("Owner", ""), *((n, " class='num'") for n in names),
                    ("Entry", " class='num'"), ("Submitted", "")])
    body = "".join(
        "<tr>"
        f"<td class='num rank'>{r.rank}</td><td class='owner'>{e(r.owner)}</td>"
        + "".join(f"<td class='num score' data-field='{e(n)}'>{_value(r, n)}</td>" for n in names)
        + f"<td class='num entry'>{r.entry_id}</td><td class='submitted'>{e(r.submitted_at)}</td></tr>"
        for r in rows)
    if not rows:
        body = f"<tr><td colspan='{len(names) + 4}'>No scored entries yet.</td></tr>"
    caption = (f"Each owner's best scored entry, ranked by {e(PRIMARY)}; a tie goes to the earlier submission."
               + (f" Generated {e(generated_at)}." if generated_at else ""))
    return ("<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; style-src 'unsafe-inline'\">"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>{e(title(challenge, late, phase))}</title><style>{_CSS}</style></head><body>"
            f"<h1>{e(title(challenge, late, phase))}</h1>"
            f"<table id='leaderboard'><caption>{caption}</caption><thead><tr>{head}</tr></thead>"
            f"<tbody>{body}</tbody></table></body></html>\n")


def write_file(path: Path, text: str) -> None:
    """Replace `path` whole, so that a web server publishing it never serves half a board."""
    path = Path(path)
    try:
        durable_write(path, [text.encode("utf-8")], mode=0o644, sync_dir=False)
    except OSError as exc:
        raise VmjudgeError(f"cannot write {path} ({exc.strerror or exc}): give a file in an existing, "
                           "writable directory.") from exc
