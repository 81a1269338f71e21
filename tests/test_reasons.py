"""Every reason the code can record has its row (vmjudge/reasons), and every row is a reason the code
records: the source is read for each place a reason is made (the errors' first argument, a `reason=`,
a Verdict's reason, the guest's EntryFault), an f-string there standing for each row it matches.
The rows' faults agree with the errors that raise them; the docs page, `vmjudge reasons` and the
portal's /reasons are made from the rows."""

from __future__ import annotations

import ast
import re
import runpy

import pytest

from vmjudge.errors import EntryError
from vmjudge.reasons import FAULTS, REASONS, find, link
from vmjudge.vm.channel import FrameStream
from vmjudge.vm.reading import check_agent_error

from .cli import REPO, run_cli
from .test_frames import hello, stream_of

SOURCE = REPO / "vmjudge"
# The class that makes a reason -> the faults a row of it may have.
MAKERS = {"EntryError": {"refused", "entry"}, "EntryFault": {"entry"}, "Verdict": {"entry"},
          "InfrastructureError": {"infrastructure"}, "GpuFault": {"infrastructure"}, "ChallengeError": {"challenge"},
          "reason=": {"entry", "refused", "infrastructure"}, "sql": {"infrastructure"}}
CODE = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")


# An f-string's field in a reason -> the values it takes there (a field not named here fails the test).
FIELDS = {"stage": ("quiz", "exam"),  # stages/submission.py's Verdicts
          "reason": ("evaluation", "scorer")}  # stages/score/container.py's collected_file
SQL = re.compile(r"reason = '([a-z-]+)'")


def _pattern(node: ast.expr) -> str | None:
    """A regular expression for the reasons `node` can be: a literal itself, an f-string with each of
    its fields one of its FIELDS; None for anything else (a variable passes a reason on)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return re.escape(node.value)
    if isinstance(node, ast.JoinedStr):
        return "".join(re.escape(v.value) if isinstance(v, ast.Constant) else
                       "(?:" + "|".join(FIELDS[ast.unparse(v.value)]) + ")" for v in node.values)  # type: ignore
    return None


def _named_reason(node: ast.AST) -> list[ast.expr]:
    """The values `reason = ...` and `reason, message = ..., ...` give."""
    if not isinstance(node, ast.Assign) or len(node.targets) != 1:
        return []
    target, value = node.targets[0], node.value
    if isinstance(target, ast.Name) and target.id == "reason":
        return [value]
    if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
        return [v for t, v in zip(target.elts, value.elts, strict=False)
                if isinstance(t, ast.Name) and t.id == "reason"]
    return []


def made_in_source() -> list[tuple[str, str, str]]:
    """(pattern, maker, where) for each place in vmjudge/ a reason is made."""
    found = []
    for path in sorted(SOURCE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            where = f"{path.relative_to(REPO)}:{getattr(node, 'lineno', 0)}"
            found += [(p, "reason=", where) for v in _named_reason(node) if (p := _pattern(v))]
            if isinstance(node, ast.Constant) and isinstance(node.value, str):  # the queue's SQL
                found += [(re.escape(code), "sql", where) for code in SQL.findall(node.value)]
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            if name in MAKERS and node.args and (p := _pattern(node.args[0])) is not None:
                found.append((p, name, where))
            for k in node.keywords:
                if k.arg == "reason" and (p := _pattern(k.value)):
                    found.append((p, "reason=", where))
    return found


def test_the_source_is_read_for_every_kind_of_place_a_reason_is_made():
    makers = {m for _, m, _ in made_in_source()}
    assert makers == set(MAKERS)  # a scan that found none of one kind would prove nothing of it
    assert len(made_in_source()) > 150


def test_every_reason_the_code_makes_has_its_row_and_the_row_its_fault():
    missing, wrong = [], []
    for pattern, maker, where in made_in_source():
        rows = [r for r in REASONS if re.fullmatch(pattern, r.code)]
        if not rows:
            missing.append(f"{where}: {pattern}")
        wrong += [f"{where}: {r.code} is {r.fault}, made by {maker}" for r in rows if r.fault not in MAKERS[maker]
                  and r.code != "data-disk"]  # a record no disk can hold is the challenge's (data_disk.py)
    assert not missing, "reasons with no row in vmjudge/reasons: " + "; ".join(missing)
    assert not wrong


def test_every_row_is_a_reason_the_code_makes():
    patterns = [p for p, _, _ in made_in_source()]
    dead = [r.code for r in REASONS if not any(re.fullmatch(p, r.code) for p in patterns)]
    assert dead == ["entry-fault"]  # the one the judge gives a guest's fault that names no reason (vm/channel.py)


def test_each_row_is_whole_and_its_code_unique():
    codes = [r.code for r in REASONS]
    assert len(codes) == len(set(codes))
    for r in REASONS:
        assert CODE.fullmatch(r.code) and r.fault in FAULTS, r
        for said in (r.means, r.remedy):
            assert said[:1].isupper() and said.endswith((".", ".)")) and "\n" not in said and len(said) < 400, r


def test_the_docs_page_is_made_from_the_rows():
    hooks = runpy.run_path(str(REPO / "scripts/mkdocs_hooks.py"))
    mark, make = hooks["MADE"]["reference/reasons.md"]
    assert mark in (REPO / "docs/reference/reasons.md").read_text()
    made = make()
    for r in REASONS:
        assert f'<span id="{r.code}"></span>`{r.code}`' in made and r.means.replace("|", "\\|") in made
    for c in FAULTS.values():
        assert f"## {c.title}" in made


def test_vmjudge_reasons_prints_a_row_and_refuses_a_code_it_does_not_know():
    done = run_cli("reasons", "vm-restore", "quiz-mismatch")
    assert done.returncode == 0, done.stderr
    row = find("vm-restore")
    assert row is not None and row.remedy in done.stdout and FAULTS["infrastructure"].retried in done.stdout
    assert done.stdout.index("vm-restore (") < done.stdout.index("quiz-mismatch (")
    everything = run_cli("reasons")
    assert all(f"\n{r.code} (" in f"\n{everything.stdout}" for r in REASONS)
    unknown = run_cli("reasons", "vm-restor")
    assert unknown.returncode == 1 and "no reason is called 'vm-restor'" in unknown.stderr


@pytest.mark.parametrize("code", ["quiz-mismatch", "vm-restore"])
def test_a_link_names_the_row(code):
    assert link(code) == f"/reasons#{code}" and link(code, "https://judge.example") == f"https://judge.example/reasons#{code}"


@pytest.mark.parametrize(("said", "recorded"), [
    ("entry-too-large", "entry-too-large"), ("bad-archive", "bad-archive"), ("vm-restore", "entry-fault"),
    ("made-up", "entry-fault"), (None, "entry-fault")])
def test_the_guest_names_only_an_entry_reason_of_the_list(said, recorded):
    """The guest the entry ran in may say anything: an entry fault is recorded under a reason of the
    list, and never as the judge's."""
    fs = FrameStream("n1")
    error = {"message": "no room", "fault": "entry", **({"reason": said} if said else {})}
    fs.feed(stream_of(hello(), ("error", error), ("bye", {"commands": 0})))
    assert fs.transcript.entry_fault == recorded
    with pytest.raises(EntryError) as err:
        check_agent_error(fs.transcript, None)
    assert err.value.reason == recorded
