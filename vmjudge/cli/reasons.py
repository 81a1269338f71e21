"""`vmjudge reasons`: what a reason code in a report, a parked message or `vmjudge entries` means,
whose fault it is, and what to do about it (the rows of vmjudge/reasons)."""

from __future__ import annotations

import click

from ..errors import VmjudgeError
from ..reasons import REASONS, find
from ..reasons.page import text
from .echo import echo


@click.command()
@click.argument("codes", nargs=-1)
def reasons(codes: tuple[str, ...]) -> None:
    """What each reason CODE means and what to do about it (every reason, without CODE)."""
    rows = [find(c) for c in codes]
    unknown = [c for c, r in zip(codes, rows, strict=True) if r is None]
    if unknown:
        raise VmjudgeError(f"no reason is called {unknown[0][:64]!r}: `vmjudge reasons` lists them all.")
    echo(text([r for r in rows if r is not None] if codes else REASONS).rstrip("\n"))
