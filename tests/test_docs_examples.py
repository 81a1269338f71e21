"""What the documentation shows as code is run here, so the page cannot show code that does not
work: the scorer plug-in of docs/authors.md ("Writing a scorer") scores a challenge that
`challenge new` wrote, loaded by the name its comment gives, as stage 4 would load it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from vmjudge.cli.starter import TEST, write_starter
from vmjudge.config import load_challenge
from vmjudge.queue.results import ExamResults
from vmjudge.scorers.loader import load_scorer, scorer_version

AUTHORS = Path(__file__).resolve().parent.parent / "docs" / "authors.md"


def scorer_block() -> str:
    section = AUTHORS.read_text().split("### Writing a scorer", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_scorer_plug_in_of_the_authors_guide_scores_as_it_says(tmp_path, monkeypatch):
    code = scorer_block()
    assert code.startswith('# mypkg/scoring.py, named in challenge.toml as  scorer = "mypkg.scoring:exact"')
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "scoring.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("mypkg", "mypkg.scoring"):
        monkeypatch.delitem(sys.modules, name, raising=False)

    write_starter(tmp_path / "plug", "plug", "answer-lines", "accuracy")
    toml = tmp_path / "plug" / "challenge.toml"
    toml.write_text(toml.read_text().replace('scorer = "accuracy"', 'scorer = "mypkg.scoring:exact"'))
    ch = load_challenge(tmp_path / "plug")
    assert ch.scorer == "mypkg.scoring:exact"
    score = load_scorer(ch.scorer, ch.score_options)
    assert scorer_version(ch.scorer).startswith("mypkg.scoring:exact@")

    labels = dict(line.split(",") for line in (ch.reference_dir / "REFERENCE.csv").read_text().split())
    assert set(labels) == set(TEST) == set(ch.test)
    right = ExamResults(records=ch.test, answers=labels)
    assert score(right, ch.reference_dir) == {"correct": 4.0, "score": 1.0}
    wrong = ExamResults(records=ch.test, answers={**labels, ch.test[0]: "wrong", ch.test[1]: None})
    assert score(wrong, ch.reference_dir) == {"correct": 2.0, "score": pytest.approx(0.5)}
