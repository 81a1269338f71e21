"""The organiser's evaluation container as stage 4 (#56), judged end to end in real VMs: examples/hecktor2025's
Task 1 in its sanity phase, scored by an evaluation image built here from Grand Challenge's own evaluation
template as the forge renders it (tests/gc_evaluation.py: its Dockerfile's steps without Docker, the
organiser's edit computing Dice), then by evaluations that fail in each way an evaluation can (busybox scripts);
and Task 2 scored by the same template's evaluation computing the concordance index.

The good evaluation scores the template's good algorithm exactly as the built-in dice scorer scores the same
archived masks, and Task 2's its risks as the built-in cindex does. Each failing evaluation (a crash, no
metrics.json, one of 100 MB, one past [limits] score, one that tries the network, which the VM does not have)
holds its entry for the organiser at once with its named reason and what it printed, is never retried, and
tells the participant nothing but that the judge failed."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pytest

from vmjudge.config import load_challenge
from vmjudge.config.layout import Layout
from vmjudge.queue.db import Queue
from vmjudge.queue.results import archived_results, load
from vmjudge.scorers.builtin import cindex, dice
from vmjudge.scorers.mha import read_mha, write_mha
from vmjudge.vm import domain

from . import gc_evaluation, gc_template
from . import oci_images as oci
from .host_lock import linked_home
from .oci_images import Image, Layer
from .published import wait_until_published
from .test_container_pipeline import Judged, busybox_members
from .test_gc_runtime import HECKTOR, account
from .test_pipeline import vmjudge

SCORE = """[score]
kind = "container"
image = "evaluation.tar.gz"
metric = "aggregates.dice"
home = 256
"""
# Each evaluation, and what becomes of its entry: (state, reason).
EXPECT = {"good": ("done", None), "task2": ("done", None), "crash": ("parked", "evaluation-failed"),
          "no-metrics": ("parked", "evaluation-no-metrics"), "huge-metrics": ("parked", "evaluation-metrics"),
          "slow": ("parked", "evaluation-timeout"), "network": ("parked", "evaluation-failed")}
# The failing evaluations, each a busybox script (the good one is Grand Challenge's template, built in gc_evaluation).
FAILING = {"crash": "echo 'Traceback (most recent call last): the evaluation broke' >&2; exit 1",
           "no-metrics": "echo evaluated",
           "huge-metrics": "head -c 104857600 /dev/zero | tr '\\0' ' ' > /output/metrics.json",
           "slow": "sleep 600"}
# The template's own evaluation, trying the network first: the VM has no interface, so the connection fails.
NETWORK = '    import socket\n\n    socket.create_connection(("1.1.1.1", 80), timeout=5)\n'

SEG = "/output/images/tumor-lymph-node-segmentation"
COPY_CT = f"mkdir -p {SEG} && cp /input/images/ct/*.mha {SEG}/output.mha"  # a quick entry: the CT as its mask
RISK = "wc -c < /input/ehr.json > /output/rfs.json"  # a quick Task 2 entry: the record's size as its risk


class Evaluated(Judged):
    """The daemon's run, then the rescore after the ground truth was corrected: (rescore's JSON, the host's
    dice on the corrected reference, (the good entry's document and the host's dice before it))."""

    rescored: tuple[dict, dict, tuple[dict, dict]]
    stderr: tuple[dict, dict, dict]  # the template's stderr sample in hk-good: its document, host dice before, after
    cindex: dict  # the host's cindex on Task 2's archived risks
    stderr_id: int


def challenge(work: Path, name: str, evaluation: Path) -> Path:
    """examples/hecktor2025/task1 (task2 for "task2") as challenge hk-NAME, scored by `evaluation`."""
    path = work / f"hk-{name}"
    shutil.copytree(gc_evaluation.TASK2.directory if name == "task2" else HECKTOR, path)
    shutil.copy(evaluation, path / "evaluation.tar.gz")
    text = (path / "challenge.toml").read_text()
    start, end = text.index("[score]"), text.index("# HECKTOR's three phases")
    text = text[:start] + SCORE + "\n" + text[end:]
    text = re.sub(r'name = "hecktor2025-task[12]"', f'name = "hk-{name}"', text)
    if name == "task2":
        text = text.replace('metric = "aggregates.dice"', 'metric = "aggregates.c_index"')
    limit = 15 if name == "slow" else 600
    text = text.replace("[limits]\n", f"[limits]\nscore = {limit}\n")
    (path / "challenge.toml").write_text(text)
    return path


@pytest.fixture(scope="module")
def judged(site, image, conn):
    home = linked_home(site.home, "evaluation-container-")
    work = home / "work"
    work.mkdir()
    base = Layer.of([m for m in busybox_members() if m.info.name not in ("etc/passwd", "etc/group")] + account(),
                    compression=None)
    evaluations = {"good": gc_evaluation.evaluation_image(image.root, work / "evaluation"),
                   "network": gc_evaluation.evaluation_image(image.root, work / "evaluation-network", NETWORK),
                   "task2": gc_evaluation.evaluation_image(image.root, work / "evaluation-2", task=gc_evaluation.TASK2)}
    for name, script in FAILING.items():
        evaluations[name] = oci.docker_save(work / f"evaluation-{name}.tar.gz", Image(
            [base], cmd=["/bin/sh", "-c", script], env=["PATH=/bin"], user="user"), compress=True)
    for name in EXPECT:
        vmjudge(home, "challenge", "add", str(challenge(work, name, evaluations[name])))
    quick = oci.docker_save(work / "quick.tar.gz", Image([base], cmd=["/bin/sh", "-c", COPY_CT], env=["PATH=/bin"],
                                                        user="user"), compress=True)
    risk = oci.docker_save(work / "risk.tar.gz", Image([base], cmd=["/bin/sh", "-c", RISK], env=["PATH=/bin"],
                                                      user="user"), compress=True)
    samples = gc_template.sample_images(image.root, work / "template")
    template = samples["good"]
    ids = {}
    for name in ("slow", *(n for n in EXPECT if n != "slow")):
        archive = {"good": template, "task2": risk}.get(name, quick)
        ids[name] = int(vmjudge(home, "submit", f"hk-{name}", str(archive), "--owner", name, "--phase",
                                "sanity").stdout)
    stderr = int(vmjudge(home, "submit", "hk-good", str(samples["stderr"]), "--owner", "stderr", "--phase",
                         "sanity").stdout)  # the template's other sample that scores (it warns on stderr)
    vmjudge(home, "daemon", "--slots", "2", "--until-idle")
    wait_until_published(home)
    judged = Evaluated(home, ids, {})
    before = judged.show("good"), host_dice(home, ids["good"], work / "hk-good")
    stderr_before = json.loads(vmjudge(home, "show", str(stderr), "--json").stdout), host_dice(home, stderr,
                                                                                               work / "hk-good")
    # A corrected ground truth: HN-101's label made empty, then the board's entry scored again by the container.
    truth = work / "hk-good" / "phases" / "sanity" / "reference" / "REFERENCE-HN-101.mha"
    shape = read_mha(truth.read_bytes()).shape
    truth.write_bytes(write_mha(shape, "MET_UCHAR", bytes(math.prod(shape))))
    rescored = json.loads(vmjudge(home, "rescore", "hk-good", "--phase", "sanity", "--json").stdout)
    judged.rescored = rescored, host_dice(home, ids["good"], work / "hk-good"), before
    judged.stderr = (*stderr_before, host_dice(home, stderr, work / "hk-good"))
    judged.stderr_id = stderr
    judged.cindex = host_dice(home, ids["task2"], work / "hk-task2", cindex)
    judged._shown.clear()
    yield judged
    assert domain.leftover_domains(conn) == []
    shutil.rmtree(home)


def host_dice(home: Path, entry_id: int, directory: Path, scorer=dice) -> dict:
    """The built-in dice scorer (or `scorer`) on the entry's archived outputs, against the challenge's reference
    now."""
    layout = Layout(home)
    found = archived_results(Queue(layout.queue_db), home, entry_id)
    assert found is not None
    ch = load_challenge(directory).in_phase("sanity")
    return scorer.score(load(home, found.sha256), ch.reference_dir, ch.score_options)


def score_attempts(judged: Judged, name: str) -> list[dict]:
    return [a for a in judged.show(name, organiser=True)["organiser"]["attempts"] if a["stage"] == "score"]


@pytest.mark.parametrize("name", list(EXPECT))
def test_each_evaluation_gets_its_outcome_once_never_the_entrys_failure(judged, name):
    doc, full = judged.show(name), judged.show(name, organiser=True)
    state, reason = EXPECT[name]
    assert full["state"] == state and full["outcome"] == ("scored" if state == "done" else None), full["report"]
    attempts = score_attempts(judged, name)
    assert len(attempts) == 1, attempts  # never run again: a retry would fail alike and cost a VM run
    if state != "done":
        assert attempts[0]["status"] == "infra" and attempts[0]["reason"] == reason, attempts
        assert "could not be completed because of a problem on the judge's side" in doc["report"], doc["report"]


def by_entry(rescored: dict, entry_id: int) -> dict:
    return next(e for e in rescored["entries"] if e["entry_id"] == entry_id)


def test_the_evaluation_scores_what_the_built_in_dice_scores_on_the_same_masks(judged):
    """Both of the template's samples that score: the good one, and the one that warns on stderr."""
    _, _, (doc, expected) = judged.rescored
    assert doc["scores"]["score"] == pytest.approx(expected["score"]), doc["report"]
    stderr_doc, stderr_expected, _ = judged.stderr
    assert stderr_doc["outcome"] == "scored", stderr_doc["report"]
    assert stderr_doc["scores"]["score"] == pytest.approx(stderr_expected["score"]), stderr_doc["report"]
    manifest = score_attempts(judged, "good")[0]["manifest"]
    assert (manifest["scorer"], manifest["jobs"]) == ("container", 3)
    metrics = judged.show("good", organiser=True)["organiser"]["metrics"]  # per case: the organiser's alone
    rescored, _, _ = judged.rescored  # the file is the last evaluation's: the rescore's
    assert len(metrics["results"]) == 3 and metrics["aggregates"]["dice"] == by_entry(rescored, judged.ids["good"])[
        "new"]["score"]
    assert "metrics" not in judged.show("good")


def test_rescore_runs_the_evaluation_again_on_a_corrected_ground_truth_as_the_host_scorer_would(judged):
    rescored, expected, (before, _) = judged.rescored
    assert len(rescored["entries"]) == 2, rescored  # the good sample and the stderr sample
    entry = by_entry(rescored, judged.ids["good"])
    assert entry["status"] == "rescored" and entry["new"]["score"] == pytest.approx(expected["score"]), rescored
    assert entry["new"]["score"] != pytest.approx(before["scores"]["score"])  # the label changed the score
    assert by_entry(rescored, judged.stderr_id)["new"]["score"] == pytest.approx(judged.stderr[2]["score"])
    assert judged.show("good")["scores"]["score"] == pytest.approx(expected["score"])
    history = judged.show("good", organiser=True)["organiser"]
    assert "rescore" in json.dumps(history)


def test_what_a_failing_evaluation_printed_reaches_the_organiser_alone(judged):
    crash = score_attempts(judged, "crash")[0]["message"]
    assert "the evaluation exited with status 1" in crash and "the evaluation broke" in crash, crash
    network = score_attempts(judged, "network")[0]["message"]
    assert "Network is unreachable" in network, network  # no interface: the connection never leaves the VM
    huge = score_attempts(judged, "huge-metrics")[0]["message"]
    assert "more than [score] metrics_bytes (1,048,576)" in huge, huge
    assert "did not finish within 15 s ([limits] score)" in score_attempts(judged, "slow")[0]["message"]
    for name, said in (("crash", "the evaluation broke"), ("network", "unreachable")):
        assert said not in json.dumps(judged.show(name)), name


def test_task_2s_evaluation_scores_what_the_built_in_cindex_scores_on_the_same_risks(judged):
    doc = judged.show("task2")
    assert doc["scores"]["score"] == pytest.approx(judged.cindex["score"]), (doc["report"], judged.cindex)
    assert judged.cindex["comparable_pairs"] == 3 and judged.cindex["failed"] == 0, judged.cindex
    manifest = score_attempts(judged, "task2")[0]["manifest"]
    assert (manifest["scorer"], manifest["jobs"]) == ("container", 3)
    metrics = judged.show("task2", organiser=True)["organiser"]["metrics"]
    assert sorted(r["case"] for r in metrics["results"]) == ["HN-101", "HN-102", "HN-103"]
