"""The organiser's evaluation container as stage 4 (#56), on the host: [score] kind = "container" read and
refused in a sentence, the CD it is given (predictions.json in Grand Challenge's shape, each succeeded
case's outputs at PK/output/RELATIVE_PATH, the reference as its ground truth), metrics.json read and
every way it fails named as the challenge's fault, a ground truth bound read-only beside the input, and
the challenge's fault holding the entry at once, never retried. Real VMs: tests/test_evaluation_container.py."""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest

from vmjudge.config import load_challenge, load_site
from vmjudge.config.evaluation import GROUND_TRUTH
from vmjudge.errors import ChallengeError, ConfigError, ScoringError
from vmjudge.images import build
from vmjudge.queue.db import Queue
from vmjudge.queue.results import ExamResults
from vmjudge.stages.score.container import CD_INPUT, CD_TRUTH, evaluation_media, metrics_file, parsed, scores_of
from vmjudge.supervisor.rescore import rescore
from vmjudge.vm.channel import CommandResult, FileResult
from vmjudge.vm.job import InRoot

from .test_sockets import CT, SOCKETS, challenge

CONTAINER = SOCKETS.replace('[score]\nscorer = "dice"\nsocket = "tumor-lymph-node-segmentation"\n', """[score]
kind = "container"
image = "evaluation/image.tar.gz"
metric = "aggregates.dice.mean"
[[score.column]]
name = "dsc_agg"
path = "aggregates.DSCagg"
title = "Aggregated Dice"
""")


def evaluated(tmp_path, text=CONTAINER):
    challenge(tmp_path, text)
    (tmp_path / "reference" / "REFERENCE-tec1.mha").write_bytes(CT)
    (tmp_path / "reference" / "sub").mkdir()
    (tmp_path / "reference" / "sub" / "labels.csv").write_text("case,label\n")
    return load_challenge(tmp_path)


def test_a_container_score_is_read_with_its_metric_and_columns(tmp_path):
    ch = evaluated(tmp_path)
    rules = ch.evaluation
    assert rules is not None and ch.scorer == "container"
    assert (rules.image, rules.metric, rules.ground_truth) == (tmp_path / "evaluation/image.tar.gz",
                                                               "aggregates.dice.mean", GROUND_TRUTH)
    assert [(c.name, c.path, c.title) for c in rules.columns] == [("dsc_agg", "aggregates.DSCagg", "Aggregated Dice")]
    assert ch.limits.score == 900.0


@pytest.mark.parametrize("change, said", [
    (("metric = \"aggregates.dice.mean\"\n", ""), "needs metric"),
    (("image = \"evaluation/image.tar.gz\"\n", ""), "needs image"),
    (("image = \"evaluation/image.tar.gz\"", "image = \"../elsewhere.tar\""), r"\[score\] image = "),
    (("metric = \"aggregates.dice.mean\"", "metric = \"$.aggregates\""), r"keys of metrics.json joined by dots"),
    (("name = \"dsc_agg\"", "name = \"score\""), "must differ from each other and from \"score\""),
    (("[score]\nkind = \"container\"", "[score]\nkind = \"docker\""), r"\[score\] kind = 'docker' is not allowed"),
    (("[score]\n", "[score]\nground_truth = \"/input/truth\"\n"), "outside /input and /output"),
    (("[score]\n", "[score]\norder = \"lowest\"\n"), r"\[score\] order = 'lowest' is not allowed"),
])
def test_a_container_score_that_is_wrong_is_refused_in_a_sentence(tmp_path, change, said):
    with pytest.raises(ConfigError, match=said):
        evaluated(tmp_path, CONTAINER.replace(*change))


def test_a_container_score_needs_sockets(tmp_path):
    (tmp_path / "challenge.toml").write_text('name = "x"\n[score]\nkind = "container"\nimage = "e.tar"\nmetric = "m"\n')
    with pytest.raises(ConfigError, match=r"reads the entries' outputs by socket: declare them"):
        load_challenge(tmp_path)


def test_the_evaluation_is_given_grand_challenges_predictions_and_the_ground_truth(tmp_path):
    ch = evaluated(tmp_path)
    mask = CT.replace(b"MET_SHORT", b"MET_UCHAR")
    exam = ExamResults(records=("tec1", "tec2"), outputs={
        "tec1": {"tumor-lymph-node-segmentation": mask, "recurrence-free-survival": b"31.5"},
        "tec2": {"tumor-lymph-node-segmentation": None, "recurrence-free-survival": b"12"}})  # failed in the exam
    media, jobs = evaluation_media(ch, 7, exam)
    (job,) = json.loads(media[f"{CD_INPUT}/predictions.json"])
    assert jobs == 1 and job["status"] == "Succeeded" and uuid.UUID(job["pk"])
    assert [v["interface"]["slug"] for v in job["inputs"]] == ["ct-image", "electronic-health-record"]
    assert job["inputs"][1]["value"] == {"Age": 71, "M-stage": "M0"}
    mask_value, rfs = job["outputs"]
    assert mask_value["image"]["name"] == "output.mha" and mask_value["value"] is None
    assert rfs["value"] == 31.5 and rfs["image"] is None and rfs["interface"]["relative_path"] == "rfs.json"
    pk = job["pk"]
    assert media[f"{CD_INPUT}/{pk}/output/images/tumor-lymph-node-segmentation/output.mha"] == mask
    assert media[f"{CD_INPUT}/{pk}/output/rfs.json"] == b"31.5"
    assert media[f"{CD_TRUTH}/REFERENCE-tec1.mha"] == tmp_path / "reference" / "REFERENCE-tec1.mha"
    assert media[f"{CD_TRUTH}/sub/labels.csv"] == tmp_path / "reference" / "sub" / "labels.csv"
    assert not any("tec2" in k for k in media)  # nothing of the failed case
    again, _ = evaluation_media(ch, 7, exam)
    assert again[f"{CD_INPUT}/predictions.json"] == media[f"{CD_INPUT}/predictions.json"]  # the same jobs each time
    other, _ = evaluation_media(ch, 8, exam)
    assert json.loads(other[f"{CD_INPUT}/predictions.json"])[0]["pk"] != pk  # another entry's jobs are its own


def test_an_empty_ground_truth_or_answer_line_results_are_the_challenges_fault(tmp_path):
    ch = evaluated(tmp_path)
    with pytest.raises(ChallengeError, match="hold no socket outputs"):
        evaluation_media(ch, 1, ExamResults(records=("tec1",), answers={"tec1": "N"}))
    for f in sorted((tmp_path / "reference").rglob("*"), reverse=True):
        f.unlink() if f.is_file() else f.rmdir()
    with pytest.raises(ChallengeError, match="holds no file to give the evaluation as its ground truth"):
        evaluation_media(ch, 1, ExamResults(records=("tec1",), outputs={"tec1": {"tumor-lymph-node-segmentation": b"x",
                                                                               "recurrence-free-survival": b"1"}}))


def ran(status="ok", exit_code=0, metrics: bytes | None = b'{"aggregates": {"dice": {"mean": 0.75}}}', size=None,
        printed=b""):
    cmd = CommandResult(0, "the evaluation", status=status, exit_code=exit_code, output=bytearray(printed))
    if metrics is not None:
        cmd.files["metrics.json"] = FileResult("metrics.json", len(metrics) if size is None else size, metrics)
    return cmd


@pytest.mark.parametrize("done, reason, said", [
    (ran("error", 1, None, printed=b"Traceback ...\nKeyError: 'HN-001'\n"), "evaluation-failed",
     "exited with status 1. Its output ends:\nTraceback ...\nKeyError: 'HN-001'"),
    (ran("timeout", None, None), "evaluation-timeout", r"did not finish within 900 s \(\[limits\] score\)"),
    (ran(metrics=None), "evaluation-no-metrics", "wrote no /output/metrics.json"),
    (ran(metrics=b"{" * 1024, size=100 << 20), "evaluation-metrics", "104,857,600 bytes, more than"),
    (None, "evaluation-failed", "did not run to its end"),
])
def test_each_way_an_evaluation_fails_is_named_as_the_challenges_fault(tmp_path, done, reason, said):
    rules = evaluated(tmp_path).evaluation
    with pytest.raises(ChallengeError, match=said) as caught:
        metrics_file(done, rules, 900.0)
    assert caught.value.reason == reason


def test_the_score_and_columns_are_read_at_their_paths(tmp_path):
    rules = evaluated(tmp_path).evaluation
    assert scores_of({"aggregates": {"dice": {"mean": 0.75}, "DSCagg": 0.8}}, rules) == {"score": 0.75, "dsc_agg": 0.8}
    assert scores_of({"aggregates": {"dice": {"mean": 1}, "DSCagg": "n/a"}}, rules) == {"score": 1.0, "dsc_agg": None}
    for bad in ({"aggregates": {"dice": {"mean": float("nan")}}}, {"aggregates": {"dice": {"mean": True}}},
                {"aggregates": {"dice": [0.7]}}, [], {"aggregates": {"dice": {"mean": "0.7"}}}):
        with pytest.raises(ChallengeError, match=r"no finite number at aggregates.dice.mean \(\[score\] metric\)"):
            scores_of(bad, rules)
    for bad in (b"{not json", b"\xff\xfe"):
        with pytest.raises(ChallengeError, match="metrics.json is not JSON"):
            parsed(bad)


GUEST_SPEC = """
import json, sys
sys.path.insert(0, sys.argv[1])
from root_spec import RootSpec
from system import JobError
out = []
for doc in json.loads(sys.argv[2]):
    try:
        out.append(RootSpec(doc).binds)
    except JobError as exc:
        out.append(str(exc))
print(json.dumps(out))
"""


def guest_specs(*docs: object) -> list:
    """The guest's own check of each "root" document, run on the guest's Python."""
    proc = subprocess.run(["/usr/bin/python3", "-I", "-S", "-c", GUEST_SPEC, str(build.GUEST_DIR), json.dumps(docs)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_a_ground_truth_is_bound_read_only_at_its_own_path_never_over_the_input_or_output():
    where = InRoot(input="/input", output="/output", input_dir="eval", binds=((GROUND_TRUTH, "ground_truth"),))
    for path in ("/input/truth", "/output", "/"):
        with pytest.raises(ValueError):
            InRoot(input="/input", output="/output", input_dir="eval", binds=((path, "ground_truth"),))
    bad = [[{"path": "/input/x", "cd_dir": "g"}], [{"path": "/opt/x", "cd_dir": "../g"}],
           [{"path": "/proc/x", "cd_dir": "g"}], [{"path": "/opt/x", "cd_dir": "g"}] * 2, "x",
           [{"path": f"/opt/{i}", "cd_dir": "g"} for i in range(5)]]
    found = guest_specs(where.document(), *({"input_dir": "eval", "binds": b} for b in bad))
    assert found[0] == [[GROUND_TRUTH.split("/")[1:], "ground_truth"]]
    assert [type(f) for f in found[1:]] == [str] * len(bad), found  # each refused in a sentence
    assert "overlaps the input" in found[1] and "not a relative path on the CD" in found[2]


def test_rescore_of_a_container_scored_challenge_takes_its_ground_truth_from_the_challenge(tmp_path):
    """The evaluation reads the reference directory it is given at ground_truth: a --reference elsewhere would
    score against labels no stage 4 used, so it is refused before anything runs; a missing evaluation image is
    the challenge's fault, said in a sentence, nothing recorded."""
    (tmp_path / "ch").mkdir()
    (tmp_path / "home").mkdir()
    ch = evaluated(tmp_path / "ch")
    site = load_site(tmp_path / "home")
    queue = Queue(site.layout.queue_db)
    queue.add_challenge(ch.name, ch.directory, "0" * 20)
    with pytest.raises(ScoringError, match=r"is scored in a VM, which reads its reference from .*reference: correct"):
        rescore(site, queue, ch.name, reference=tmp_path / "elsewhere")
    with pytest.raises(ChallengeError, match=r"evaluation image .*image.tar.gz cannot be read \(No such file"):
        rescore(site, queue, ch.name)
