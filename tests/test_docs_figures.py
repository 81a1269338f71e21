"""Figures that cannot drift: every measured figure a user page or the README states is the one
bench/figures.toml records (the docs place it with {{ figure NAME }}, the README writes it out), so no
two pages can give the same figure two values; and a quoted section name is a link."""

from __future__ import annotations

import re
import runpy

import pytest

from .cli import REPO
from .docs_page import DOCS
from .test_docs_pages import USER_PAGES, prose

HOOKS = runpy.run_path(str(REPO / "scripts/mkdocs_hooks.py"))
FIGURES = HOOKS["figures"]()
# How far after the words that name a figure its number may stand, within one sentence.
WINDOW = 45
NUMBER = r"(\d+(?:\.\d+)?(?:[-–]\d+(?:\.\d+)?)?)"


def unit(value: str) -> str:
    """The words after a figure's number ("s", "times", "of a cold boot")."""
    m = re.fullmatch(NUMBER + r"\s*(.+)", value)
    assert m, value
    return m.group(2)


def stated(text: str, said: str, value: str) -> list[str]:
    """Each number `text` gives for the figure named by `said` whose unit is `value`'s: the first such
    number after the naming words, within WINDOW characters and the same sentence."""
    found = []
    pattern = re.compile(NUMBER + r"\s*" + re.escape(unit(value)).replace(r"\ ", r"\s+") + r"(?![\w-])")
    for m in re.finditer(said, text, flags=re.I):
        after = re.split(r"(?<!\d)\.(?=\s|$)", text[m.end():m.end() + WINDOW])[0]
        number = pattern.search(after)
        if number:
            found.append(number.group(0))
    return found


def wrong_statements(text: str) -> list[tuple[str, str]]:
    """(figure, what the text says) for each statement of a recorded figure that is not its value."""
    flat = " ".join(prose(text).split())
    return [(name, said) for name, f in FIGURES.items() for said in stated(flat, f["said"], f["value"])
            if " ".join(said.replace("–", "-").split()) != f["value"]]


def pages() -> dict[str, str]:
    found = {name: HOOKS["placed"]((DOCS / name).read_text(), name) for name in USER_PAGES}
    return {**found, "README.md": (REPO / "README.md").read_text()}


def test_every_page_states_each_figure_as_recorded():
    assert {name: bad for name, text in pages().items() if (bad := wrong_statements(text))} == {}


def test_the_check_finds_a_figure_given_another_value():
    """The check itself: the cold boot as a page once gave it, and a figure named in the next sentence."""
    assert wrong_statements("Under TCG a cold boot costs each stage 8-10 s before its first command.") == \
        [("cold_boot", "8-10 s")]
    value = FIGURES["cold_boot"]["value"]
    assert wrong_statements(f"The VM booted cold in {value}, against 5.1 s for the bare kernel.") == []
    assert wrong_statements("A cold boot. Then it took 12 s.") == []  # another sentence's number


def test_every_placed_figure_is_recorded_and_listed():
    for name in USER_PAGES:
        for figure in HOOKS["PLACED"].findall((DOCS / name).read_text()):
            assert figure in FIGURES, (name, figure)
    listed = HOOKS["figures_markdown"]()
    assert all(f["value"] in listed and f["measured"] in listed for f in FIGURES.values())
    with pytest.raises(ValueError, match="no_such"):
        HOOKS["placed"]("{{ figure no_such }}", "x.md")


def test_a_quoted_section_name_is_a_link():
    """A section named in quotes ("Notifications") is a link mkdocs --strict checks, not words a reader
    must search for: a quoted run of capitalised words followed by 'section' or 'below/above', or in a
    'see "..."', is refused unless it is the text of a link."""
    quoted = re.compile(r'(?:[Ss]ee|in|under|\bthe) "([A-Z][^"\n]{2,60})"(?! *\])(?=[ ,.;:)]*(?:section|below|above|'
                        r'in |on |of |\)|,|\.|;))')
    found = {name: quoted.findall(prose(text).replace("\n", " ")) for name, text in pages().items()}
    assert {name: hits for name, hits in found.items() if hits} == {}
