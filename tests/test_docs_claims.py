"""What the docs say of the code, held to the code where a sentence names a figure or an order the
code decides: the benchmark's loop sizes, the claim's order, and what the replica test compares "word for
word". Docs that drift from the code fail here. And the README, which only summarises the docs (issue
#34): short, its two commands, and every link into docs/ one that resolves."""

from __future__ import annotations

import importlib.util
import re

from markdown.extensions.toc import slugify

from .docs_page import README, REPO, every_page, one_line, page, pages

ARCHITECTURE = page("architecture.md")
README_TEXT = README.read_text()


def test_the_timing_spread_loop_sizes_are_the_benchs_own():
    spec = importlib.util.spec_from_file_location("timing_spread", REPO / "bench" / "timing_spread.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    default = tuple(int(n) for n in bench.arguments().parse_args([]).work.split(","))
    said = one_line(every_page())
    assert "pure-Python loops of {:g} and {:g} million steps by default".format(*(n / 1e6 for n in default)) in said
    # Figures measured with other sizes name the option that gave them, right after the sizes.
    measured = re.findall(r"(?:loops|records) of ([\d.]+) and ([\d.]+) million steps(.{0,40})", said)
    assert len(measured) >= 3
    for small, large, after in measured:
        sizes = (round(float(small) * 1e6), round(float(large) * 1e6))
        assert sizes == default or f"`--work {sizes[0]},{sizes[1]}`" in after, (small, large, after)


def test_no_document_says_a_slot_claims_the_oldest_stage():
    """Fair share decides (queue/fair_share.py); "oldest" is only its last tie-break."""
    for path in [README, *pages()]:
        name, said = path.relative_to(REPO), one_line(path.read_text())
        assert not re.search(r"claims? the oldest", said), name
        assert not re.search(r"GPU challenges, oldest first", said), name
    assert "claims the stage fair share puts first" in one_line(page("organisers.md"))
    assert "claims the stage it may run that fair share puts first" in one_line(ARCHITECTURE)


def test_word_for_word_says_which_lines_the_replica_comparison_leaves_out():
    """tests/test_replica.py compares the replica's report with the judge's without the lines of
    figures (measured on each machine): the participants' guide and the architecture say so."""
    replica_test = (REPO / "tests" / "test_replica.py").read_text()
    left_out = re.search(r"if not line\.startswith\(\((.*?)\)\)", replica_test, re.S)
    assert left_out is not None
    prefixes = [p.strip().strip('"').rstrip(": ") for p in left_out.group(1).split(",") if p.strip()]
    assert prefixes == ["Resources", "Slowest records"]
    for text in (page("participants.md"), ARCHITECTURE):
        assert "word for word" in text
        for prefix in prefixes:
            assert f"`{prefix}:`" in text


def test_the_readme_stays_a_summary():
    """Issue #34: the README says what vmjudge is and how to start, in at most 200 lines; the rest is in docs/."""
    assert len(README_TEXT.splitlines()) <= 200


def test_the_readmes_two_commands_are_the_docs_and_the_makefiles():
    """The README's code blocks (the two commands, the stages' picture) are copies of the docs' own, word for
    word, so that the README says nothing the docs do not; `make demo` and `make test` are Makefile targets."""
    fenced = re.findall(r"^( *)```[a-z]*\n(.*?)^\1```", README_TEXT, re.S | re.M)
    blocks = [re.sub(rf"^{indent}", "", block, flags=re.M) for indent, block in fenced]
    assert any("make demo" in b and "make test" in b for b in blocks)
    docs = every_page()
    for block in blocks:
        assert block in docs, f"a README code block not in docs/:\n{block}"
    makefile = (REPO / "Makefile").read_text()
    for target in ("demo", "test", "setup"):
        assert re.search(rf"^{target}:", makefile, re.M), target


def test_every_local_link_of_the_readme_resolves():
    """Relative links only, each to a file that exists; those into docs/ to a page of the site (mkdocs.yml's nav),
    and an anchor to a heading of that page (mkdocs's own check covers the docs, not the README)."""
    links = re.findall(r"\]\(([^)\s]+)\)", README_TEXT)
    local = [link for link in links if not re.match(r"[a-z]+:", link)]
    assert any(link.startswith("docs/") for link in local)
    nav = (REPO / "mkdocs.yml").read_text()
    for link in local:
        path, _, anchor = link.partition("#")
        assert not path.startswith("/"), link
        target = REPO / path
        assert target.is_file(), link
        if path.startswith("docs/"):
            assert f" {path.removeprefix('docs/')}\n" in nav, f"{link}: not in mkdocs.yml's nav"
        if anchor:
            # The anchors mkdocs gives the headings: Python-Markdown's toc extension, its own slugify.
            headings = [slugify(h, "-") for h in re.findall(r"^#{1,6} (.*?)\s*$", target.read_text(), re.M)]
            assert anchor in headings, link
