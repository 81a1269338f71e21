"""What a newcomer reads (#59): the guides and the reference cite no issue numbers (there is no tracker a
reader could follow them to; the status and development pages, which are the project's own, may), and the
glossary defines the words the guides use in a sense of their own."""

from __future__ import annotations

import re

from .docs_page import DOCS, page

USER_PAGES = ("index.md", "tutorial.md", "organisers.md", "authors.md", "participants.md", "runtime.md",
              "grand-challenge.md", "security.md", "reference/api.md", "reference/configuration.md",
              "reference/report.md", "reference/glossary.md", "reference/reasons.md", "reference/figures.md")
ISSUE = re.compile(r"(?:\\?#|\bissues? )\d{2}\b")


def prose(text: str) -> str:
    """`text` without its fenced code blocks (a shell comment or a colour may hold # and digits)."""
    return re.sub(r"```.*?```", "", text, flags=re.S)


def test_no_user_page_cites_an_issue_number():
    found = {name: ISSUE.findall(prose(page(name))) for name in USER_PAGES}
    assert not {name: hits for name, hits in found.items() if hits}
    assert set(USER_PAGES) <= {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}


def test_the_glossary_defines_the_words_of_the_guides():
    defined = set(re.findall(r"^\*\*([^*]+)\*\*", page("reference/glossary.md"), flags=re.M))
    assert {"Board", "Carry", "Owner", "Parked", "Publish time", "Slot", "TCG", "Team", "Phase"} <= defined
