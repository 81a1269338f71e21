"""The reasons as the docs' table (docs/reference/reasons.md, through scripts/mkdocs_hooks.py)
and as `vmjudge reasons` prints them: one rendering per reader, the rows always REASONS."""

from __future__ import annotations

from collections.abc import Iterable

from . import FAULTS, REASONS
from .reason import Fault, Reason


def by_fault() -> list[tuple[Fault, list[Reason]]]:
    """The reasons of each fault, in FAULTS' order."""
    return [(f, [r for r in REASONS if r.fault == f]) for f in FAULTS]


def markdown() -> str:
    """One section per fault: what the fault means for the entry, then a table of its reasons, each
    row's anchor its code (so `reasons.md#vm-restore` finds it)."""
    out: list[str] = []
    for fault, rows in by_fault():
        c = FAULTS[fault]
        out += [f"## {c.title}", "", f"**Run again:** {c.retried}  ", f"**Charged:** {c.charged}  ",
                f"**The participant sees:** {c.participant_sees}", "",
                "| Reason | When | What happened | What to do |", "|---|---|---|---|"]
        out += [f'| <span id="{r.code}"></span>`{r.code}` | {r.where} | {_cell(r.means)} | {_cell(r.remedy)} |'
                for r in rows]
        out.append("")
    return "\n".join(out)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def text(rows: Iterable[Reason]) -> str:
    """Each reason as `vmjudge reasons` prints it: the code and its fault, then what happened, what
    to do, and what the fault means for the entry."""
    out = []
    for r in rows:
        c = FAULTS[r.fault]
        out.append(f"{r.code} ({c.title.lower()}; {r.where})\n  What happened: {r.means}\n  What to do: {r.remedy}\n"
                   f"  Run again: {c.retried}\n  Charged: {c.charged}")
    return "\n\n".join(out) + "\n"
