"""Grand Challenge's evaluation template as tests/gc_evaluation.py builds it for HECKTOR 2025 Tasks 1 and 2 (#56),
run on the host: its evaluate.py and helpers.py (the rendered files, with the organiser's edit, on the stand-ins
the image installs) run over what stage 4 gives an evaluation (stages/score/container.py's predictions.json,
outputs and ground truth, in directories of this test where the image has /input, /output and
/opt/ml/input/data/ground_truth) and write the Dice, or the concordance index, that vmjudge's built-in scorer
gives the same outputs. In real VMs: tests/test_evaluation_container.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vmjudge.config import load_challenge
from vmjudge.queue.results import ExamResults
from vmjudge.scorers.builtin import cindex, dice
from vmjudge.scorers.mha import read_mha, write_mha
from vmjudge.stages.score.container import CD_INPUT, CD_TRUTH, evaluation_media

from . import gc_evaluation
from .gc_template import STAND_INS

TRUTH = "/opt/ml/input/data/ground_truth"


def rendered(work: Path, task: gc_evaluation.Task) -> Path:
    context = gc_evaluation.render(work, task)
    (context / "evaluate.py").write_text(gc_evaluation.organiser_edit((context / "evaluate.py").read_text(), task))
    (context / "resources" / "cases.json").write_text(json.dumps(gc_evaluation.case_map(task)))
    return context


def evaluated(tmp_path: Path, task: gc_evaluation.Task, ch, outputs: dict) -> dict:
    """metrics.json as the task's evaluation writes it for these outputs, given as stage 4 gives them."""
    context = rendered(tmp_path / "rendered", task)
    media, jobs = evaluation_media(ch, 1, ExamResults(records=ch.test, outputs=outputs))
    assert jobs == len(ch.test)
    for name, value in media.items():  # the CD as the VM would see it
        target = tmp_path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(value.read_bytes() if isinstance(value, Path) else value)
    site = tmp_path / "site"
    for name, source in STAND_INS.items():
        (site / name).mkdir(parents=True)
        (site / name / "__init__.py").write_text(source)
    app = tmp_path / "app"
    app.mkdir()
    (tmp_path / "output").mkdir()
    text = (context / "evaluate.py").read_text()
    for image_path, here in (('"/input"', tmp_path / CD_INPUT), ('"/output"', tmp_path / "output"),
                             (f'"{TRUTH}"', tmp_path / CD_TRUTH), ('"/opt/app/resources"', context / "resources")):
        assert text.count(image_path) == (1 if image_path != '"/opt/app/resources"' else len(task.interfaces)), \
            image_path
        text = text.replace(image_path, f'"{here}"')
    (app / "evaluate.py").write_text(text)
    (app / "helpers.py").write_bytes((context / "helpers.py").read_bytes())
    done = subprocess.run([sys.executable, "evaluate.py"], cwd=app, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((tmp_path / "output" / "metrics.json").read_text())


def masks(ch) -> dict[str, bytes]:
    """HN-101's mask the reference itself, HN-102's empty, HN-103's the reference's first half only."""
    made = {}
    for i, record in enumerate(ch.test):
        ref = read_mha((ch.reference_dir / f"REFERENCE-{record}.mha").read_bytes())
        values = list(ref.values())
        values = values if i == 0 else [0] * len(values) if i == 1 else values[:len(values) // 2] + [0] * (
            len(values) - len(values) // 2)
        made[record] = write_mha(ref.shape, "MET_UCHAR", bytes(int(v) for v in values))
    return made


def test_the_evaluation_writes_the_dice_the_built_in_scorer_gives(tmp_path):
    ch = load_challenge(gc_evaluation.HECKTOR).in_phase("sanity")
    made = masks(ch)
    outputs = {r: {"tumor-lymph-node-segmentation": made[r]} for r in ch.test}
    metrics = evaluated(tmp_path, gc_evaluation.TASK1, ch, outputs)
    by_case = {r["case"]: r["dice"] for r in metrics["results"]}
    expected = dice.score(ExamResults(records=ch.test, outputs=outputs), ch.reference_dir, ch.score_options)
    assert by_case[ch.test[0]] == 1.0 and by_case[ch.test[1]] == 0.0 and 0 < by_case[ch.test[2]] < 1, by_case
    assert metrics["aggregates"]["dice"] == pytest.approx(expected["score"]), (metrics, expected)


@pytest.mark.parametrize("risks", [(0.9, 0.2, -0.4), (-1.0, 0.5, 0.5), (0.1, 0.1, 0.1), (3.0, 7.5, 1e-3)])
def test_task_2s_evaluation_writes_the_concordance_index_the_built_in_scorer_gives(tmp_path, risks):
    """Through both of the phase's interfaces (HN-102 has the planning CT and dose, the others not)."""
    ch = load_challenge(gc_evaluation.TASK2.directory).in_phase("sanity")
    outputs = {r: {"recurrence-free-survival": json.dumps(risk).encode()} for r, risk in zip(ch.test, risks,
                                                                                               strict=True)}
    metrics = evaluated(tmp_path, gc_evaluation.TASK2, ch, outputs)
    assert {r["case"]: r["risk"] for r in metrics["results"]} == dict(zip(ch.test, risks, strict=True))
    expected = cindex.score(ExamResults(records=ch.test, outputs=outputs), ch.reference_dir, ch.score_options)
    assert metrics["aggregates"]["c_index"] == pytest.approx(expected["score"]), (metrics, expected)
