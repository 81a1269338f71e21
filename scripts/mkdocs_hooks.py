"""MkDocs hooks (mkdocs.yml `hooks:`): what the pages must not state twice is filled in at build time.

- The reasons page's table is made from the code's own list (vmjudge/reasons), so it cannot leave out
  a reason the code records.
- `{{ figure NAME }}` on any page becomes the figure as bench/figures.toml last recorded it, and the
  figures page lists them all with their dates; a name that is not recorded fails the build.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from vmjudge.reasons.page import markdown as reasons_markdown

REPO = Path(__file__).resolve().parent.parent
FIGURES = REPO / "bench" / "figures.toml"
PLACED = re.compile(r"\{\{ figure ([a-z_]+) \}\}")


def figures() -> dict[str, dict[str, str]]:
    with open(FIGURES, "rb") as f:
        return tomllib.load(f)


def placed(text: str, where: str) -> str:
    """`text` with each {{ figure NAME }} replaced by its recorded value."""
    known = figures()

    def value(m: re.Match[str]) -> str:
        if m.group(1) not in known:
            raise ValueError(f"{where} names a figure {m.group(1)!r} that bench/figures.toml does not record")
        return known[m.group(1)]["value"]
    return PLACED.sub(value, text)


def figures_markdown() -> str:
    rows = ["| Figure | Value | Measured | How |", "|---|---|---|---|"]
    rows += [f"| {f['what']} | {f['value']} | {f['measured']} | {f['how']} |" for f in figures().values()]
    return "\n".join(rows) + "\n"


# page -> (the line the generated part replaces, what makes it)
MADE = {"reference/reasons.md": ("<!-- every reason, from vmjudge/reasons -->", reasons_markdown),
        "reference/figures.md": ("<!-- every figure, from bench/figures.toml -->", figures_markdown)}


def on_page_markdown(text: str, page: Any, **kwargs: Any) -> str:
    made = MADE.get(page.file.src_uri)
    if made is not None:
        mark, make = made
        if mark not in text:
            raise ValueError(f"{page.file.src_uri} has lost its line {mark}, where its generated part goes")
        text = text.replace(mark, make())
    return placed(text, page.file.src_uri)
