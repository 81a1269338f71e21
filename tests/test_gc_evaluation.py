"""Grand Challenge's evaluation template as tests/gc_evaluation.py builds it for HECKTOR 2025 Task 1 (#56), run
on the host: its image's config is the Dockerfile's, and its evaluate.py and helpers.py (the rendered files, with
the organiser's edit, on the stand-ins the image installs) run over what stage 4 gives an evaluation
(stages/score/container.py's predictions.json, outputs and ground truth, in directories of this test where the
image has /input, /output and /opt/ml/input/data/ground_truth) and write the Dice that vmjudge's built-in scorer
gives the same masks. In real VMs: tests/test_evaluation_container.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vmjudge.config import load_challenge
from vmjudge.queue.results import ExamResults
from vmjudge.scorers.builtin import dice
from vmjudge.scorers.mha import read_mha, write_mha
from vmjudge.stages.score.container import CD_INPUT, CD_TRUTH, evaluation_media

from . import gc_evaluation
from .gc_template import STAND_INS

TRUTH = "/opt/ml/input/data/ground_truth"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("gc-evaluation")
    context = gc_evaluation.render(work)
    (context / "evaluate.py").write_text(gc_evaluation.organiser_edit((context / "evaluate.py").read_text()))
    (context / "resources" / "cases.json").write_text(json.dumps(gc_evaluation.case_map()))
    return context


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


def test_the_evaluation_writes_the_dice_the_built_in_scorer_gives(rendered, tmp_path):
    ch = load_challenge(gc_evaluation.HECKTOR).in_phase("sanity")
    made = masks(ch)
    outputs = {r: {"tumor-lymph-node-segmentation": made[r]} for r in ch.test}
    media, jobs = evaluation_media(ch, 1, ExamResults(records=ch.test, outputs=outputs))
    assert jobs == 3
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
    text = (rendered / "evaluate.py").read_text()
    for image_path, here in (('"/input"', tmp_path / CD_INPUT), ('"/output"', tmp_path / "output"),
                             (f'"{TRUTH}"', tmp_path / CD_TRUTH), ('"/opt/app/resources"', rendered / "resources")):
        assert text.count(image_path) == 1, image_path
        text = text.replace(image_path, f'"{here}"')
    (app / "evaluate.py").write_text(text)
    (app / "helpers.py").write_bytes((rendered / "helpers.py").read_bytes())
    done = subprocess.run([sys.executable, "evaluate.py"], cwd=app, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    metrics = json.loads((tmp_path / "output" / "metrics.json").read_text())
    by_case = {r["case"]: r["dice"] for r in metrics["results"]}
    expected = dice.score(ExamResults(records=ch.test, outputs=outputs), ch.reference_dir, ch.score_options)
    assert by_case[ch.test[0]] == 1.0 and by_case[ch.test[1]] == 0.0 and 0 < by_case[ch.test[2]] < 1, by_case
    assert metrics["aggregates"]["dice"] == pytest.approx(expected["score"]), (metrics, expected)

