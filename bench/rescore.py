"""Benchmark: re-scoring archived results, entries per second (JSON on stdout).

Makes a home with N (default 1000) beats2014 entries taken through the queue to the end:
each gets a different set of synthetic detections (the reference beats of every test
record, jittered, some dropped, some added, seeded), archived through the results store
as the exam stage archives them, and scored by the real stage 4. No VM is started.

Then, on the same data:
- baseline: the beats2014 scorer called directly on the N results, already in memory;
- rescore: `rescore.rescore()` in this process (archive reads, hash checks, one
  transaction for the N scorings, the HTML reports);
- cli: `vmjudge rescore beats2014 --json` as a command (process start and output included).
Baseline and rescore run --rounds times, interleaved, and the best of each counts (a busy
host slows both alike). ratio = rescore entries/s ÷ baseline entries/s, so 1.0 means the
archive and database add nothing. Every re-scored number must equal the baseline's, and a second rescore must give
the same numbers (checked; the run fails otherwise).

--smoke: 20 entries, one round, the same checks (seconds; what the test suite runs).

Usage: python bench/rescore.py [--smoke] [--entries 1000] [--rounds 3] [--home DIR] [--seed 2014]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import wfdb  # noqa: E402

from vmjudge.config import load_challenge, load_site  # noqa: E402
from vmjudge.queue.db import Queue  # noqa: E402
from vmjudge.queue.results import ExamResults, encode, put  # noqa: E402
from vmjudge.scorers.builtin.beats2014 import score as beats2014_score  # noqa: E402
from vmjudge.supervisor import rescore  # noqa: E402
from vmjudge.supervisor.evaluate import run_stage  # noqa: E402
from vmjudge.supervisor.slots import Slot  # noqa: E402

EXAMPLE = REPO / "examples" / "beats2014"


def encode_annotations(samples: list[int]) -> bytes:
    """The annotation file a detector writes (WFDB MIT format), written by wfdb itself."""
    with tempfile.TemporaryDirectory() as tmp:
        wfdb.wrann("answer", "qrs", np.array(samples, dtype=np.int64), symbol=["N"] * len(samples), write_dir=tmp)
        return (Path(tmp) / "answer.qrs").read_bytes()


def detections(rng: random.Random, beats: list[int], length: int) -> bytes | None:
    """A detector's output for one record: jittered beats (some beyond the 150 ms window),
    a few missed, a few false; now and then no file at all (a failed record)."""
    if rng.random() < 0.03:
        return None
    found = [b + rng.randint(-45, 45) for b in beats if rng.random() > 0.05]
    found += [rng.randrange(length) for _ in range(rng.randint(0, 3))]
    return encode_annotations(sorted(max(0, s) for s in set(found)))


def make_home(home: Path, n: int, seed: int) -> tuple[Queue, list[ExamResults], list[int]]:
    site = load_site(home)
    site.layout.ensure()
    queue = Queue(site.layout.queue_db)
    ch = load_challenge(EXAMPLE)
    queue.add_challenge(ch.name, ch.directory, "bench")
    reference = {r: [int(s) for s in wfdb.rdann(str(ch.reference_dir / r), "atr").sample] for r in ch.test}
    length = 250 * 20
    rng = random.Random(seed)
    spool = site.layout.spool
    all_results, ids = [], []
    for i in range(n):
        files = {r: detections(rng, reference[r], length) for r in ch.test}
        statuses = {r: ("ok" if files[r] is not None else "error") for r in ch.test}
        archive = spool / f"team{i}-entry.tar.gz"
        archive.write_bytes(str(i).encode())
        entry_id = queue.add_entry(ch.name, f"team{i % 97}", False, hashlib.sha256(str(i).encode()).hexdigest(),
                                   archive.name, archive)
        for stage, nxt in (("prep", "quiz"), ("quiz", "exam")):
            queue.claim_next(only=entry_id)
            queue.finish_stage(queue.start_stage(entry_id, stage, 0), "passed", "ok", {}, next_stage=nxt)
        queue.claim_next(only=entry_id)
        run = queue.start_stage(entry_id, "exam", 0)
        digest = put(home, encode(ch.test, statuses, "files", files=files))
        queue.finish_stage(run, "passed", "ok", {"results_sha256": digest}, next_stage="score",
                           results_sha256=digest)
        run_stage(queue, site, queue.claim_next(only=entry_id), Slot(0))  # the official stage 4
        all_results.append(ExamResults(records=ch.test, files=files))
        ids.append(entry_id)
    return queue, all_results, ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=1000)
    parser.add_argument("--home", type=Path, default=None, help="where to make the home (default: a temp dir)")
    parser.add_argument("--seed", type=int, default=2014)
    parser.add_argument("--rounds", type=int, default=3, help="baseline and rescore runs, interleaved")
    parser.add_argument("--smoke", action="store_true", help="20 entries, one round: seconds, the same checks")
    args = parser.parse_args()
    if args.smoke:
        args.entries, args.rounds = 20, 1
    base = Path(tempfile.mkdtemp(prefix="bench-rescore-", dir=args.home))
    home = base / "home"
    try:
        started = time.perf_counter()
        queue, all_results, ids = make_home(home, args.entries, args.seed)
        setup_seconds = time.perf_counter() - started
        reference = EXAMPLE / "reference"
        site = load_site(home)
        baseline_times, rescore_times = [], []
        for _ in range(args.rounds):  # interleaved, best of each: a busy host slows both alike
            started = time.perf_counter()
            baseline = [beats2014_score(r, reference) for r in all_results]
            baseline_times.append(time.perf_counter() - started)
            started = time.perf_counter()
            report = rescore.rescore(site, queue, "beats2014")
            rescore_times.append(time.perf_counter() - started)
            assert report.ok and [e.entry_id for e in report.entries] == ids, report.summary()
            assert [e.new for e in report.entries] == baseline, "a re-scored number differs from the scorer's own"
        baseline_seconds, rescore_seconds = min(baseline_times), min(rescore_times)

        started = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "vmjudge.cli", "rescore", "beats2014", "--json"], cwd=REPO,
                              capture_output=True, text=True, env={**os.environ, "VMJUDGE_HOME": str(home)})
        cli_seconds = time.perf_counter() - started
        assert proc.returncode == 0, proc.stderr
        again = json.loads(proc.stdout)["entries"]
        assert [e["new"] for e in again] == baseline, "a later rescore gave different numbers"
        assert len(queue.scorings(ids[0])) == 2 + args.rounds  # official, the rounds, the command's

        n = args.entries
        print(json.dumps({
            "benchmark": "rescore", "smoke": args.smoke, "entries": n, "challenge": "beats2014",
            "records_per_entry": len(all_results[0].records),
            "setup_seconds": round(setup_seconds, 2),
            "rounds": args.rounds,
            "baseline": {"what": "beats2014 scorer called directly on results in memory (best round)",
                         "seconds": round(baseline_seconds, 3), "entries_per_second": round(n / baseline_seconds, 1),
                         "all_seconds": [round(t, 3) for t in baseline_times]},
            "rescore": {"what": "rescore.rescore(): archive, scorer, one transaction, reports (best round)",
                        "seconds": round(rescore_seconds, 3), "entries_per_second": round(n / rescore_seconds, 1),
                        "all_seconds": [round(t, 3) for t in rescore_times]},
            "cli": {"what": "vmjudge rescore beats2014 --json (one more rescore, process start included)",
                    "seconds": round(cli_seconds, 3), "entries_per_second": round(n / cli_seconds, 1)},
            "ratio": round(baseline_seconds / rescore_seconds, 3),
            "cli_ratio": round(baseline_seconds / cli_seconds, 3),
            "same_numbers_twice": True,
            "host": {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version()},
        }, indent=2))
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
