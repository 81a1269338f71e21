"""The one table of stages (vmjudge/pipeline.py) that the queue, the reports, the daemon and the
replica take the order from."""

import pytest

from vmjudge.pipeline import FIRST, PIPELINE, by_name, next_stage
from vmjudge.stages.exam import stage as exam
from vmjudge.stages.prep import stage as prep
from vmjudge.stages.quiz import stage as quiz
from vmjudge.stages.score import stage as score


def test_the_four_stages_in_physionets_order_with_their_functions():
    assert [(s.number, s.name, s.in_vm, s.title) for s in PIPELINE] == [
        (1, "prep", True, "Stage 1 (prep)"), (2, "quiz", True, "Stage 2 (quiz)"),
        (3, "exam", True, "Stage 3 (exam)"), (4, "score", False, "Stage 4 (score)")]
    assert [s.load() for s in PIPELINE] == [prep.run, quiz.run, exam.run, score.run]


def test_each_stage_leads_to_the_next_and_the_last_to_none():
    assert FIRST == "prep"
    assert [next_stage(s.name) for s in PIPELINE] == ["quiz", "exam", "score", None]
    assert by_name("exam") is PIPELINE[2]
    with pytest.raises(KeyError, match="no stage named 'setup'"):
        by_name("setup")
