"""Stage 4 by the organiser's evaluation container ([score] kind = "container"), as Grand Challenge runs
a phase's evaluation method: in a VM with no network, in the evaluation image's own root, given

- /input/predictions.json: the entry's cases as algorithm jobs, each {"pk", "status", "inputs",
  "outputs"} with its socket values in inputs.json's shape;
- /input/PK/output/RELATIVE_PATH: each case's outputs from the entry's archived stage-3 results (an
  image socket's one image inside its directory, a value socket's JSON file);
- the challenge's reference directory, read-only, at [score] ground_truth (Grand Challenge unpacks a
  phase's ground truth tarball at /opt/ml/input/data/ground_truth);

and collecting /output/metrics.json, at most [score] metrics_bytes of it. The score is the number at
[score] metric, each [[score.column]] another. A case that failed in the exam is not a job here: Grand
Challenge gives its evaluation the jobs that succeeded.

Whatever goes wrong in the evaluation (it crashes, overruns [limits] score, writes no metrics.json, a
larger or malformed one, or none at the metric's path) is the challenge's fault, never the entry's: a
ChallengeError, which holds the entry for the organiser at once (a retry would fail alike), and
`vmjudge rescore` scores it once the challenge is fixed. What the evaluation printed is in the stage's
log and the organiser's message, never in what a participant sees.
"""

from __future__ import annotations

import hashlib
import json
import math
import uuid
from pathlib import Path
from typing import Any

from ...config import Challenge
from ...config.evaluation import EvaluationRules
from ...errors import ChallengeError
from ...images.evaluation_root import evaluation_root
from ...queue import results
from ...queue.results import ExamResults
from ...queue.rows import Scoring
from ...scorers.reference import reference_sha256
from ...vm.channel import CommandResult, Watch
from ...vm.job import Command, InRoot, Job
from ...vm.reading import Limits
from ..context import StageContext, StageOutcome, output_text
from ..sockets import NAMESPACE, inputs_json

INPUT, CD_INPUT, CD_TRUTH = "/input", "eval", "ground_truth"
MARGIN = 60.0  # seconds of the stage's cap beyond the evaluation's own: the agent's start and the files' return
SHOWN = 2000  # characters of what the evaluation printed, in the organiser's message


def run(ctx: StageContext, why: str = "official") -> StageOutcome:
    """Stage 4 (`why` "official"), or a re-scoring of the entry's archived results ("rescore", whose
    VM's console and log are its own: the stage's stay as they were)."""
    stage = "score" if why == "official" else "rescore"
    ch = ctx.challenge
    rules = ch.evaluation
    assert rules is not None and ctx.archived is not None
    root = evaluation_root(ctx.site.layout, rules)
    media, jobs = evaluation_media(ch, ctx.entry.id, results.load(ctx.site.home, ctx.archived))
    cfg = root.config
    where = InRoot(user=cfg.user, env=cfg.env, workdir=cfg.workdir or "/", input=INPUT, output="/output",
                   input_dir=CD_INPUT, binds=((rules.ground_truth, CD_TRUTH),), stderr_apart=True)
    command = Command("the evaluation", cfg.command, ch.limits.score, output_limit=ch.limits.output,
                      tail_limit=ch.limits.output_tail, collect=("metrics.json",), file_limit=rules.metrics_bytes,
                      root=where)
    home = ctx.files.directory / "evaluation-home.img"
    ctx.jobs.new_home(home, rules.home_mib)
    try:
        with ctx.stage_log(stage) as log:
            run_ = ctx.run(stage, Job(commands=(command,), media=media, entry_root=root.path),
                           home, Limits(stage_cap=ch.limits.score + MARGIN), Watch(log=log))
    finally:
        home.unlink(missing_ok=True)
    done = run_.transcript.commands[0] if run_.transcript.commands else None
    data = metrics_file(done, rules, ch.limits.score)
    ctx.files.metrics.write_bytes(data)  # the organiser's: per-case metrics too
    scores = scores_of(parsed(data), rules)
    scoring = Scoring(entry_id=ctx.entry.id, why=why, scorer="container",
                      scorer_version=f"evaluation image {root.image_id}", reference_sha256=reference_sha256(
                          ch.reference_dir), results_sha256=ctx.archived, scores=scores)
    manifest = {"stage": "score", "scorer": "container", "evaluation_image": root.image_id, "root": root.digest,
                "jobs": jobs, "metrics_sha256": hashlib.sha256(data).hexdigest(),
                "scorer_version": scoring.scorer_version, "reference_sha256": scoring.reference_sha256,
                "results_sha256": ctx.archived, "vm_seconds": round(run_.total_seconds, 3)}
    shown = ", ".join(f"{k} {v:.4f}" for k, v in scores.items() if v is not None)
    return StageOutcome("scored", f"Scores: {shown}.", scores=scores, manifest=manifest, scoring=scoring)


def evaluation_media(ch: Challenge, entry_id: int, exam: ExamResults) -> tuple[dict[str, Path | bytes], int]:
    """The CD's files: predictions.json and each succeeded case's outputs under eval/, the reference
    under ground_truth/; and how many jobs there are."""
    assert ch.sockets is not None
    if exam.outputs is None:
        raise ChallengeError("evaluation-results", "the entry's archived results hold no socket outputs, which an "
                             "evaluation container reads: rescore it with the scorer that made them.")
    media: dict[str, Path | bytes] = {}
    predictions: list[dict[str, Any]] = []
    for record in exam.records:
        outputs = exam.outputs.get(record, {})
        if any(outputs.get(s.slug) is None for s in ch.sockets.outputs):
            continue  # failed in the exam: not a job the evaluation is given
        pk = str(uuid.uuid5(NAMESPACE, f"{ch.name}/job/{entry_id}/{record}"))
        values = []
        for i, socket in enumerate(ch.sockets.outputs):
            data = outputs[socket.slug]
            assert data is not None
            name = "output.tif" if data[:4] in (b"II*\0", b"MM\0*", b"II+\0", b"MM\0+") else "output.mha"
            path = f"{socket.relative_path}/{name}" if socket.is_image else socket.relative_path
            media[f"{CD_INPUT}/{pk}/output/{path}"] = data
            image = {"pk": str(uuid.uuid5(NAMESPACE, f"{pk}/{socket.slug}")), "name": name} if socket.is_image else None
            values.append({"interface": socket.interface(len(ch.sockets.inputs) + i + 1), "file": None,
                           "value": None if socket.is_image else json.loads(data), "image": image, "pk": i + 1})
        predictions.append({"pk": pk, "status": "Succeeded", "inputs": json.loads(inputs_json(ch, "test", record)),
                            "outputs": values})
    media[f"{CD_INPUT}/predictions.json"] = json.dumps(predictions, indent=2).encode()
    truth = [p for p in sorted(ch.reference_dir.rglob("*")) if p.is_file()]
    if not truth:
        raise ChallengeError("evaluation-ground-truth", f"the reference directory {ch.reference_dir} holds no file "
                             "to give the evaluation as its ground truth.")
    media.update({f"{CD_TRUTH}/{p.relative_to(ch.reference_dir).as_posix()}": p for p in truth})
    return media, len(predictions)


def metrics_file(done: CommandResult | None, rules: EvaluationRules, seconds: float) -> bytes:
    """metrics.json as the evaluation left it; ChallengeError for every way it can fail to."""
    return collected_file(done, "metrics.json", seconds, "the evaluation", "evaluation",
                          f"[score] metrics_bytes ({rules.metrics_bytes:,})", "/output/metrics.json")


def collected_file(done: CommandResult | None, name: str, seconds: float, what: str, reason: str,
                   limit: str, shown: str = "") -> bytes:
    """The file `name` the organiser's command (`what`: "the evaluation", "the scorer") left in a
    stage-4 VM; ChallengeError, its reason `reason`-failed, -timeout, -no-metrics or -metrics, for every way
    it can fail to (`limit`: the setting that bounds the file and its value; `shown`: the file's name as
    the organiser knows it)."""
    shown = shown or name
    said = "" if done is None else _printed(done)
    if done is None or done.status == "running":
        raise ChallengeError(f"{reason}-failed", f"{what} did not run to its end.{said}")
    if done.status == "timeout":
        raise ChallengeError(f"{reason}-timeout", f"{what} did not finish within {seconds:.0f} s "
                             f"([limits] score).{said}")
    if done.status != "ok":
        raise ChallengeError(f"{reason}-failed", f"{what} exited with status {done.exit_code}.{said}")
    found = done.files.get(name)
    if found is None or found.size is None:
        raise ChallengeError(f"{reason}-no-metrics", f"{what} wrote no {shown}.{said}")
    if found.truncated:
        raise ChallengeError(f"{reason}-metrics", f"{what}'s {name} is {found.size:,} bytes, more than {limit}.")
    return found.data


def parsed(data: bytes) -> Any:
    try:
        return json.loads(data)
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError alike
        raise ChallengeError("evaluation-metrics", f"the evaluation's metrics.json is not JSON ({exc}).") from None


def scores_of(metrics: Any, rules: EvaluationRules) -> dict[str, float | None]:
    """The score at [score] metric and each column at its path; a column that is missing is None,
    a score that is missing or not a finite number is the evaluation's fault."""
    score = _at(metrics, rules.metric)
    if score is None:
        raise ChallengeError("evaluation-metrics", f"the evaluation's metrics.json has no finite number at "
                             f"{rules.metric} ([score] metric).")
    return {"score": score, **{c.name: _at(metrics, c.path) for c in rules.columns}}


def _at(doc: Any, path: str) -> float | None:
    for key in path.split("."):
        if not isinstance(doc, dict) or key not in doc:
            return None
        doc = doc[key]
    ok = isinstance(doc, (int, float)) and not isinstance(doc, bool) and math.isfinite(doc)
    return float(doc) if ok else None


def _printed(done: CommandResult) -> str:
    """The end of what the evaluation printed, for the organiser."""
    text = output_text(done).strip()
    return f" Its output ends:\n{text[-SHOWN:]}" if text else ""
