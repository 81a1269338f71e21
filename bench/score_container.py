"""Benchmark: stage 4 by the organiser's evaluation container against the host scorer (#56).

A socket challenge (one image input, one mask output) whose test set has N cases, and one entry whose
archived stage-3 results are written here (each case's mask its CT's copy), as the exam would have
archived them: no entry VM runs. The same results are then scored twice:

- by the host: the built-in `dice` scorer in this process (stages/score/scoring.py), as a challenge
  with `[score] scorer = "dice"` scores them;
- by an evaluation container (`[score] kind = "container"`), through `vmjudge rescore`'s own path
  (supervisor/rescore_container.py: the CD with predictions.json, every case's outputs and the ground
  truth, one VM, /output/metrics.json read back). The image is busybox whose command counts the jobs it
  was given and writes them to metrics.json: what is measured is the judge's cost, not a metric's.

For N = 10 and 100 (--smoke: 3), each seconds of both, the container's overhead per entry (its time less
the host's) and per case (the slope between the two Ns). The evaluation's root is made before the timed
runs (challenge add makes it once). JSON on stdout; exit 1 with a sentence when the evaluation did not
see every case or a score differs from what was written.
Usage: python bench/score_container.py [--smoke] [--home DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests import oci_images as oci  # noqa: E402
from tests.host_lock import in_own_home, run_holding_host, trial_guests  # noqa: E402
from tests.test_container_pipeline import busybox_members  # noqa: E402
from vmjudge.config import load_challenge, load_site  # noqa: E402
from vmjudge.images.evaluation_root import evaluation_root  # noqa: E402
from vmjudge.queue.db import Queue  # noqa: E402
from vmjudge.queue.results import encode_chunks, put_chunks  # noqa: E402
from vmjudge.scorers.mha import write_mha  # noqa: E402
from vmjudge.stages.score.scoring import ScoringRules  # noqa: E402
from vmjudge.supervisor.rescore_container import EvaluationRun  # noqa: E402

SLUG = "mask"
# The evaluation: one job per directory of /input (predictions.json is a file), the count as its metric.
EVALUATE = ('n=$(ls -d /input/*/ | wc -l); test -s /opt/ml/input/data/ground_truth/REFERENCE-t001.mha || exit 3; '
            'echo "{\\"aggregates\\": {\\"jobs\\": $n}}" > /output/metrics.json')
CHALLENGE = """name = "{name}"
[entry]
kind = "container"
[[input]]
slug = "ct-image"
kind = "image"
relative_path = "images/ct"
[[output]]
slug = "mask"
kind = "segmentation"
like = "ct-image"
[vm]
vcpus = 1
memory = 384
home = 64
[score]
kind = "container"
image = "evaluation.tar"
metric = "aggregates.jobs"
home = 64
"""


def ct(record: str) -> bytes:
    return write_mha((4, 3, 2), "MET_UCHAR", bytes((i + len(record)) % 3 for i in range(24)), (0.5, 0.5, 2.0))


def challenge(path: Path, cases: int, evaluation: Path) -> Path:
    records = [f"t{i:03d}" for i in range(1, cases + 1)]
    for subset, names in (("training", records[:1]), ("test", records)):
        (path / subset).mkdir(parents=True)
        (path / subset / "RECORDS").write_text("".join(f"{r}\n" for r in names))
        for r in names:
            (path / subset / r / "images" / "ct").mkdir(parents=True)
            (path / subset / r / "images" / "ct" / f"{r}.mha").write_bytes(ct(r))
    (path / "reference").mkdir()
    for r in records:
        (path / "reference" / f"REFERENCE-{r}.mha").write_bytes(ct(r))
    shutil.copy(evaluation, path / "evaluation.tar")
    (path / "challenge.toml").write_text(CHALLENGE.format(name=path.name))
    return path


def measure(home: Path, work: Path, cases: int, evaluation: Path) -> dict:
    site = load_site(home)
    queue = Queue(site.layout.queue_db)
    ch = load_challenge(challenge(work / f"scored-{cases}", cases, evaluation))
    queue.add_challenge(ch.name, ch.directory, "bench")
    entry_id = queue.add_entry(ch.name, "bench", False, "0" * 64, "entry.tar", evaluation)
    masks = {f"{r}/{SLUG}": ct(r) for r in ch.test}
    sha = put_chunks(home, encode_chunks(ch.test, dict.fromkeys(ch.test, "ok"), "sockets", files=masks))
    assert ch.evaluation is not None
    evaluation_root(site.layout, ch.evaluation)  # made once, as challenge add makes it
    started = time.monotonic()
    host = ScoringRules.load("dice", ch.reference_dir, ch.score_options).score(home, entry_id, sha, "rescore")
    host_s = time.monotonic() - started
    started = time.monotonic()
    container = EvaluationRun.load(site, queue, ch).score(home, entry_id, sha, "rescore")
    container_s = time.monotonic() - started
    failures = []
    if container.scores.get("score") != float(cases):
        failures.append(f"the evaluation counted {container.scores.get('score')} jobs of {cases}")
    if host.scores.get("score") != 1.0:
        failures.append(f"the host's dice is {host.scores.get('score')}, not 1.0 for masks equal to the reference")
    return {"cases": cases, "host_s": round(host_s, 4), "container_s": round(container_s, 2),
            "overhead_per_entry_s": round(container_s - host_s, 2), "failures": failures}


def evaluation_image(path: Path) -> Path:
    members = busybox_members()
    image = oci.Image([oci.Layer.of(members, compression=None)], cmd=["/bin/sh", "-c", EVALUATE], env=["PATH=/bin"])
    return oci.docker_save(path, image)


def runs(home: Path, work: Path, sizes: tuple[int, ...]) -> dict:
    evaluation = evaluation_image(work / "evaluation.tar")
    done = [measure(home, work, n, evaluation) for n in sizes]
    out: dict = {"runs": done}
    if len(done) == 2:
        a, b = done
        out["overhead_per_case_s"] = round((b["container_s"] - a["container_s"]) / (b["cases"] - a["cases"]), 4)
    return out


def arguments() -> argparse.ArgumentParser:
    """Its options, parsed before the host is taken (run_holding_host)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="3 cases: the same path, what the test suite runs")
    ap.add_argument("--home", type=Path, default=Path(os.environ.get("VMJUDGE_TEST_HOME", "/var/tmp/vmjudge-test")),
                    help="the site home whose images are used; the benchmark's own home is made in it and removed")
    return ap


def main(args: argparse.Namespace) -> None:
    trial_guests()
    sizes = (3,) if args.smoke else (10, 100)
    out = {"benchmark": "score_container", "smoke": args.smoke, "date": time.strftime("%Y-%m-%d"),
           **in_own_home(args.home, lambda home, work: runs(home, work, sizes), "bench-score-")}
    print(json.dumps(out, indent=1))
    failures = [f for r in out["runs"] for f in r["failures"]]
    if failures:
        sys.exit("bench/score_container.py: " + "; ".join(failures))


if __name__ == "__main__":
    run_holding_host(main, arguments())
