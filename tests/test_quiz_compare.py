"""The quiz's incremental answers.txt check against the rule it must keep: after each record,
the whole answers.txt must hold the submitted line for that record and every earlier one."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from vmjudge.config import Challenge, ResultsRule, ScoreOptions
from vmjudge.stages.answers import parse_answer_lines
from vmjudge.stages.quiz.stage import Comparison, refused_answer
from vmjudge.vm.channel import CommandResult, FileResult

RECORDS = ("r1", "r2", "r3", "r4")
SUBMITTED = b"r1,A\nr2,B\nr3,C\nr4,D\n"


@dataclass
class Ctx:
    """What Comparison reads of a stage's context: the challenge and the unpacked entry."""

    challenge: Challenge
    entry_dir: Path


def by_the_rule(sheets: list[bytes]) -> int | None:
    """The first record whose answers.txt breaks the rule, checked whole each time (the
    quiz's behaviour before it became incremental)."""
    submitted = parse_answer_lines(SUBMITTED)
    for i, sheet in enumerate(sheets):
        answers = parse_answer_lines(sheet)
        if any(answers.get(r) != submitted[r] for r in RECORDS[:i + 1]):
            return i
    return None


def incremental(tmp_path: Path, sheets: list[bytes]) -> int | None:
    (tmp_path / "answers.txt").write_bytes(SUBMITTED)
    compare = Comparison(Ctx(Challenge(name="c", directory=tmp_path, results=ResultsRule()), tmp_path), RECORDS)
    for i, sheet in enumerate(sheets):
        cmd = CommandResult(index=i, name=f"next.sh {RECORDS[i]}", status="ok", exit_code=0)
        cmd.files["answers.txt"] = FileResult("answers.txt", len(sheet), sheet)
        if compare.on_end(cmd):
            return compare.failure[0]
    return None


def grow(*lines: bytes) -> list[bytes]:
    return [b"".join(lines[:i + 1]) for i in range(len(lines))]


SCENARIOS = {
    "appends": grow(b"r1,A\n", b"r2,B\n", b"r3,C\n", b"r4,D\n"),
    "appends-one-wrong": grow(b"r1,A\n", b"r2,B\n", b"r3,X\n", b"r4,D\n"),
    "overwrites-without-newline": [b"r1,A", b"r2,B", b"r3,C", b"r4,D"],
    "overwrites-with-newline": [b"r1,A\n", b"r2,B\n", b"r3,C\n", b"r4,D\n"],
    "carriage-returns": grow(b"r1,A\r", b"r2,B\r", b"r3,C\r", b"r4,D\r"),
    "no-newline-then-joined": [b"r1,A", b"r1,Ar2,B\n", b"r1,Ar2,B\nr3,C\n", b"r1,Ar2,B\nr3,C\nr4,D\n"],
    "later-lines-early": [b"r1,A\nr2,B\nr3,C\nr4,D\n"] * 4,
    "changes-an-earlier-line-later": grow(b"r1,A\n", b"r2,B\n", b"r1,Z\nr3,C\n", b"r4,D\n"),
    "rewrites-sorted-backwards": [b"r1,A\n", b"r2,B\nr1,A\n", b"r3,C\nr2,B\nr1,A\n", b"r4,D\nr3,C\nr2,B\nr1,A\n"],
    "rewrites-and-drops-one": [b"r1,A\n", b"r1,A\nr2,B\n", b"r2,B\nr3,C\n", b"r2,B\nr3,C\nr4,D\n"],
    "partial-line-lost": [b"r1,A\n", b"r1,A\nr2,B", b"r1,A\nr3,C\n", b"r1,A\nr3,C\nr4,D\n"],
    "form-feed-separators": grow(b"r1,A\x0c", b"r2,B\x1c", b"r3,C\x0b", b"r4,D\n"),
}


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_incremental_check_fails_exactly_where_the_whole_file_check_does(tmp_path, name):
    sheets = SCENARIOS[name]
    assert incremental(tmp_path, sheets) == by_the_rule(sheets)


def test_the_scenarios_cover_both_verdicts():
    verdicts = {name: by_the_rule(sheets) for name, sheets in SCENARIOS.items()}
    assert verdicts["appends"] is None and verdicts["overwrites-without-newline"] == 1
    assert verdicts["partial-line-lost"] == 2 and verdicts["changes-an-earlier-line-later"] == 2


# --- answers the challenge's scorer refuses (#21) ----------------------------------------

def quiz_check(tmp_path: Path, scorer: str, submitted: bytes, invalid_answers: str = "refuse"):
    (tmp_path / "answers.txt").write_bytes(submitted)
    challenge = Challenge(name="c", directory=tmp_path, results=ResultsRule(), scorer=scorer,
                          score_options=ScoreOptions(invalid_answers=invalid_answers), training=RECORDS)
    return refused_answer(Ctx(challenge, tmp_path))


def test_quiz_refuses_the_line_the_official_scorer_would_refuse(tmp_path):
    outcome = quiz_check(tmp_path, "heart2016", b"r1,1\nr2,-1\nr3,2\nr4,0\n")
    assert (outcome.status, outcome.reason) == ("failed", "quiz-invalid-answer")
    assert outcome.message == ("answers.txt line 3 (r3,2): not 1 (abnormal), -1 (normal) or 0 (unsure); the official "
                               "heart2016 scoring refuses such an answer: make next.sh write only the allowed answers. "
                               "Entry not scored.")


def test_quiz_judges_the_line_that_counts_and_ignores_other_records(tmp_path):
    # r1's first line is replaced by a valid one; "other" is no training record; r2's empty
    # answer is no answer: nothing is refused.
    assert quiz_check(tmp_path, "af2017", b"r1,X\nother,X\nr1,N\nr2,\nr3,A\nr4,~\n") is None
    outcome = quiz_check(tmp_path, "af2017", b"r1,N\nr2,O\nr3,AF\nr4,n\n")
    assert outcome.message.startswith("answers.txt line 3 (r3,AF): not N, A, O or ~ (case matters);")


def test_quiz_takes_any_number_for_alarms2015_and_nothing_when_mapping(tmp_path):
    assert quiz_check(tmp_path, "alarms2015", b"r1,1\nr2,0\nr3,2\nr4,-1\n") is None
    refused = quiz_check(tmp_path, "alarms2015", b"r1,yes\n")
    assert refused.message.startswith("answers.txt line 1 (r1,yes): not a number")
    assert quiz_check(tmp_path, "alarms2015", b"r1,yes\n", invalid_answers="map") is None
    assert quiz_check(tmp_path, "accuracy", b"r1,anything at all\n") is None
