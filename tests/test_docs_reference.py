"""The documentation site builds, and docs/reference/configuration.md holds to the code.

The reference page against the readers of site.toml and challenge.toml: a key the
code reads that the page does not list, or a key the page lists that the code does not read, fails.

The keys are not listed here (a list kept beside the page would drift with it): they are found by
watching the real readers (vmjudge/config) read. Every table is read through a values.Section, and
every key is looked for in its `data` (`key in data`, then `data.pop(key)`), whether the file has the
key or not; so loading a file with every table makes each reader name every key it knows. A check
of the readers' source makes sure no literal key escaped the loads (a key read only in a branch
that these files do not take).
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from vmjudge.config import load_challenge, load_site
from vmjudge.config.values import Section

REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "docs" / "reference" / "configuration.md"
CONFIG = REPO / "vmjudge" / "config"

Seen = dict[str, set[str]]


class _Watched(dict[str, Any]):
    """A Section's data that notes each key its reader looks for, under the table it reads then
    (a phase's table is renamed once its name is read)."""

    def __init__(self, data: dict[str, Any], section: Section, seen: Seen):
        super().__init__(data)
        self.section, self.seen = section, seen

    def _note(self, key: object) -> None:
        if isinstance(key, str):
            self.seen[_table(self.section.table)].add(key)

    def __contains__(self, key: object) -> bool:
        self._note(key)
        return super().__contains__(key)

    def pop(self, key: Any, *default: Any) -> Any:
        self._note(key)
        return super().pop(key, *default)


def _table(name: str) -> str:
    """The table as the page names it: "phase validation.limits" is [phase.limits]."""
    return re.sub(r"^score\.column \d+$", "score.column", re.sub(r"^phase [^.]+", "phase", name))


@pytest.fixture
def watched(monkeypatch: pytest.MonkeyPatch) -> Seen:
    """The real Section, whose data is watched; nothing of its reading is replaced."""
    seen: Seen = defaultdict(set)
    original = Section.__init__

    def watching(self: Section, source: str, table: str, data: Any) -> None:
        original(self, source, table, data)
        self.data = _Watched(self.data, self, seen)

    monkeypatch.setattr(Section, "__init__", watching)
    return seen


def _keys(seen: Seen) -> dict[str, set[str]]:
    """Keys by table, without the names of sub-tables ([notify] smtp is the table [notify.smtp])."""
    return {table: {k for k in keys if f"{table}.{k}" not in seen} for table, keys in seen.items() if keys}


def _page() -> dict[str, dict[str, set[str]]]:
    """The page's keys: its `## site.toml` and `## challenge.toml` parts, each `### [table]`'s rows."""
    documented: dict[str, dict[str, set[str]]] = {}
    part = table = ""
    for line in PAGE.read_text().splitlines():
        if line.startswith("## "):
            part = line[3:].strip()
            documented[part] = {}
        elif line.startswith("### "):
            title = line[4:].strip().strip("`")
            table = "top level" if title == "top level" else title.strip("[]")
            documented[part][table] = set()
        elif line.startswith("| `") and table:
            documented[part][table].add(line.split("`")[1])
    return documented


def _literal_keys() -> set[str]:
    """Every key the readers' source names literally: the first argument of a Section's get or names
    (`sec.get("uri", ...)`), of limits' helpers (`secs("setup")`, `count("output", ...)`) and the
    second of phase's `_time(sec, "opens")`. `data.get("vm", {})` names a table, not a key."""
    keys: set[str] = set()
    for path in CONFIG.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func, arg = node.func, node.args[0]
            if isinstance(func, ast.Attribute) and func.attr in ("get", "names"):
                if not isinstance(func.value, ast.Name) or func.value.id == "data":
                    continue
            elif isinstance(func, ast.Name) and func.id in ("secs", "count"):
                pass
            elif isinstance(func, ast.Name) and func.id == "_time" and len(node.args) > 1:
                arg = node.args[1]
            else:
                continue
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                keys.add(arg.value)
    return keys


SITE_TOML = """
[site]
profile = "trial"
[libvirt]
accel = "tcg"
[results]
[image]
[slots]
[retention]
[queue]
[web]
[gpu]
ids = ["10de:1eb8"]
[notify]
[notify.smtp]
host = "localhost"
"""

PHASED_TOML = """
name = "phased"
[limits]
[[phase]]
name = "first"
opens = 2025-06-15T00:00:00Z
[phase.limits]
setup = 60
[[phase]]
name = "second"
carry = "first"
"""

# The organiser's evaluation container as the scorer: [score]'s other branch, with a [[score.column]].
EVALUATED_TOML = """
name = "evaluated"
[entry]
kind = "container"
[[output]]
slug = "mask"
kind = "segmentation"
[score]
kind = "container"
image = "evaluation.tar.gz"
metric = "aggregates.dice"
order = "higher"
ground_truth = "/opt/ml/input/data/ground_truth"
metrics_bytes = 65536
home = 256
max_size = 1073741824
max_unpacked = 2147483648
[[score.column]]
name = "dsc_agg"
path = "aggregates.DSCagg"
title = "DSCagg"
"""


def _read_everything(tmp_path: Path) -> tuple[Path, list[Path]]:
    """A home whose site.toml has every table, and challenges of every kind: the examples (answer
    lines, files, a build script, a container, a DrivenData submission)."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "site.toml").write_text(SITE_TOML)
    return home, [REPO / "examples" / name for name in ("af2017", "beats2014", "alarms2015", "segment2025",
                                                         "hecktor2025/task1", "hecktor2025/task2",
                                                         "drivendata-style")]


def test_every_key_the_code_reads_is_on_the_reference_page_and_no_other(watched: Seen, tmp_path: Path) -> None:
    home, examples = _read_everything(tmp_path)
    load_site(home)
    site_keys = _keys(watched)
    watched.clear()
    phased = tmp_path / "phased"
    phased.mkdir()
    (phased / "challenge.toml").write_text(PHASED_TOML)
    evaluated = tmp_path / "evaluated"
    evaluated.mkdir()
    (evaluated / "challenge.toml").write_text(EVALUATED_TOML)
    for directory in [*examples, phased, evaluated]:
        load_challenge(directory)
    challenge_keys = _keys(watched)
    page = _page()
    for part, read in (("site.toml", site_keys), ("challenge.toml", challenge_keys)):
        read = {table: keys for table, keys in read.items() if table != "top level" or part == "challenge.toml"}
        documented = page[part]
        missing = sorted(f"[{t}] {k}" for t, keys in read.items() for k in keys - documented.get(t, set()))
        extra = sorted(f"[{t}] {k}" for t, keys in documented.items() for k in keys - read.get(t, set()))
        assert not missing, f"{part} keys the code reads but {PAGE.name} does not list: {missing}"
        assert not extra, f"{part} keys {PAGE.name} lists but the code does not read: {extra}"
    every = {k for keys in [*site_keys.values(), *challenge_keys.values()] for k in keys}
    every |= {t.rsplit(".", 1)[1] for t in [*site_keys, *challenge_keys] if "." in t}  # a sub-table read as a key
    unread = sorted(_literal_keys() - every)
    assert not unread, (f"keys named in vmjudge/config that the loads here never read (a branch they do not "
                        f"take): {unread}; give SITE_TOML or PHASED_TOML what takes that branch")


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    """`make lint` builds it too; here so that a pytest run alone sees a broken link, a missing
    anchor or a page left out of the nav. The command reference imports vmjudge.cli (mkdocs-click),
    so this checkout's vmjudge is put first on the path."""
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    commands = (tmp_path / "site" / "reference" / "commands" / "index.html").read_text()
    for command in ("challenge add", "challenge new", "submit", "daemon", "rescore", "leaderboard", "owner add"):
        assert f"vmjudge {command}" in commands, f"the generated command reference has no `vmjudge {command}`"
    # mkdocs-click's table style printed click 8.2's "no default" marker as a default (Sentinel.UNSET)
    assert "Sentinel" not in commands


def test_no_line_of_the_docs_is_taken_for_a_heading_by_mistake() -> None:
    """Python-Markdown (MkDocs) reads a line starting with # as a heading even without a space after
    it, so a paragraph's line starting "#39." (an issue's number) would become a page title."""
    for path in sorted((REPO / "docs").rglob("*.md")):
        fence = False
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            fence = fence != line.startswith("```")
            assert fence or line.startswith("```") or not re.match(r"#[^#\s]", line), \
                f"{path.relative_to(REPO)}:{number} would be a heading: {line[:60]!r} (write \\# or reflow it)"
