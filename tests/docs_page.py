"""The documentation as the tests that hold it to the code read it: a page of docs/, or one section of
it. Tests check what the docs say (a command line, a TOML block, an error message) against what the code
does; they find that text through here, by page and heading, so that moving a paragraph between pages
is one change in the test that reads it, and a heading renamed fails loudly rather than reading nothing."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
README = REPO / "README.md"


def page(name: str) -> str:
    """docs/NAME (e.g. "participants.md", "reference/configuration.md") as written."""
    return (DOCS / name).read_text()


def pages() -> list[Path]:
    """Every page of docs/, in a fixed order."""
    return sorted(DOCS.rglob("*.md"))


def every_page() -> str:
    """Every page of docs/ one after the other, for a claim that may sit on any of them."""
    return "\n".join(path.read_text() for path in pages())


def section(name: str, heading: str) -> str:
    """The section of docs/NAME whose heading is `heading` (any level, without its #s): from the heading
    line to the next heading of the same or a higher level, so that its subsections are in it. Lines in
    fenced code blocks are never headings (a shell comment starts with # too)."""
    lines = page(name).splitlines(keepends=True)
    start, level, fenced = None, 0, False
    for i, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
            continue
        found = None if fenced else re.match(r"(#{1,6}) (.*?)\s*$", line)
        if found is None:
            continue
        if start is None and found.group(2) == heading:
            start, level = i, len(found.group(1))
        elif start is not None and len(found.group(1)) <= level:
            return "".join(lines[start:i])
    if start is None:
        raise AssertionError(f"docs/{name} has no section headed {heading!r}")
    return "".join(lines[start:])


def one_line(text: str) -> str:
    """Markdown paragraphs wrap anywhere: compare with every run of spaces and newlines as one space."""
    return re.sub(r"\s+", " ", text)
