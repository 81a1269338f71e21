"""Benchmark: an Octave challenge (`[image] packages = ["octave", "octave-signal"]`) against
the base image, built and judged in the same run on the same host (JSON on stdout).

Octave needs nothing of vmjudge but a Debian package list, so this shows what it costs rather than
whether it works in principle:
- images: the guest image of the Octave recipe and of the base recipe (`ImageRecipe()`), each
  built with `build_image` in the benchmark's own home: build seconds, root.sqfs bytes, ratios
  octave/base. An image already built there is reused and its build time is the one its manifest
  stored; --rebuild builds both again, so that both times are of this run.
- judge: a tiny answer-lines challenge written by the benchmark (3 training, 2 test records of
  400 samples: Gaussian bumps, a tone at 0.4 cycles/sample, noise; the label is the number of
  bumps; scorer "accuracy"), twice: on the Octave image with an entry whose next.sh runs
  `octave-cli --no-gui --norc --eval "pkg load signal; ..."` (Butterworth low-pass, filtfilt,
  findpeaks), and, as the baseline, on the base image with an entry that counts the same bumps
  with awk (a 5-point moving average, which nulls the tone, and threshold crossings). Both go
  through the command line as an organiser would use it: `challenge add`, `submit`,
  `daemon --slots 1 --until-idle`, `show --json --organiser`. Reported: each stage's seconds (from
  the stage runs: wall, boot, run), each command's seconds (setup.sh, next.sh RECORD, from the
  stage logs), and octave/base ratios. Both entries must be scored with score 1.0, else the
  benchmark exits 1 saying why.

Only the judging boots VMs, under tests.host_lock (one VM session per host); --wait-for-host
SECONDS polls every 60 s for a session that holds it. The judge runs in a fresh home inside --home
(its images/ a link to --home's), removed afterwards unless --keep or a failure.

Measured on 2026-11-24, this machine (2 cores, TCG, other sessions' image builds and tests running
beside it; two runs, the second reusing the images): build 92.6 s against 39.4 s (2.35x), root.sqfs
417 MB against 148 MB (2.83x; 371 Debian packages against 127, Qt 5 among them: `octave` depends on
it), the whole image 428 MB against 158 MB. Judging: Octave's setup.sh 4.4-4.5 s against 0.2-0.3 s,
its next.sh 2.5-5.6 s a record (median 3.2-3.6 s: Octave starting and loading signal and control;
the first record of a stage is the slowest, likely Octave's files read cold from the squashfs)
against 0.2-0.4 s; a stage, boot (8.5-15 s) included, 20-25 s against 12-17 s (1.4-1.8x); the
daemon 108-118 s for both entries. Both scored 1.0.

Not in CI: Octave needs nothing of vmjudge beyond a Debian package list, which CI already
exercises (af2017's python3-numpy); a test would add a 93 s build, about 430 MB and a download
of Octave's packages to every clean run, to check what this benchmark shows.

--smoke: no Octave image (a 93 s build and a download of Octave's packages): the base image only,
both challenges written (their data checked), and the baseline entry alone judged on the base
image, which must be scored 1.0; no ratios. What the test suite runs.

Usage: python bench/octave.py [--smoke] [--home /var/tmp/vmjudge-bench-octave] [--rebuild] [--keep]
                              [--wait-for-host 0]
"""

from __future__ import annotations

import json
import math
import os
import platform
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from image_bench import image_figures, parse_args, vmjudge, with_host, write_entry  # noqa: E402

from vmjudge.config import ImageRecipe  # noqa: E402

OCTAVE = ImageRecipe(packages=("octave", "octave-signal"))
# record: (bumps, seed); s01-s03 training, s04-s05 test
RECORDS = {"s01": (3, 2001), "s02": (5, 2002), "s03": (2, 2003), "s04": (4, 2004), "s05": (6, 2005)}
TRAINING, TEST = ("s01", "s02", "s03"), ("s04", "s05")
SAMPLES = 400

OCTAVE_NEXT = """#!/bin/sh
# $1.txt: one sample a line. Low-pass (4th-order Butterworth at 0.2 of Nyquist, forwards and
# backwards), then the peaks above 0.5 at least 20 samples apart: one per bump.
n=$(octave-cli --no-gui --norc --quiet --eval "pkg load signal; x = load('$1.txt'); \\
[b, a] = butter(4, 0.2); y = filtfilt(b, a, x); y(y < 0) = 0; \\
[pks, locs] = findpeaks(y, 'MinPeakHeight', 0.5, 'MinPeakDistance', 20); printf('%d\\n', numel(pks));") || exit 1
echo "$1,$n" >> answers.txt
"""
OCTAVE_SETUP = """#!/bin/sh
octave-cli --no-gui --norc --quiet --eval "pkg load signal; disp(version())" || exit 1
"""
SHELL_NEXT = """#!/bin/sh
# The same count without Octave: a 5-point moving average (it nulls the 0.4 cycles/sample tone)
# and its upward crossings of 0.5.
n=$(awk '{ w[NR % 5] = $1 } NR >= 5 { m = (w[0] + w[1] + w[2] + w[3] + w[4]) / 5
         if (!up && m > 0.5) { c++; up = 1 } else if (up && m < 0.5) up = 0 } END { print c + 0 }' "$1.txt") || exit 1
echo "$1,$n" >> answers.txt
"""
SHELL_SETUP = "#!/bin/sh\necho plain shell entry\n"
STATUS_LINE = re.compile(r"^--- (.+?): (\S+) \(exit (\S+), ([0-9.]+) s", re.M)


def signal(bumps: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    seg = SAMPLES / bumps
    x = [0.0] * SAMPLES
    for i in range(bumps):
        centre, height = seg * (i + 0.5) + rng.uniform(-seg / 8, seg / 8), rng.uniform(0.8, 1.2)
        for t in range(SAMPLES):
            x[t] += height * math.exp(-((t - centre) ** 2) / 32.0)
    return [v + 0.3 * math.sin(2 * math.pi * 0.4 * t) + rng.uniform(-0.05, 0.05) for t, v in enumerate(x)]


def crossings(x: list[float]) -> int:
    """SHELL_NEXT's rule, so that the data is checked to have one answer before any VM."""
    count, up = 0, False
    for t in range(4, len(x)):
        m = sum(x[t - 4:t + 1]) / 5
        if not up and m > 0.5:
            count, up = count + 1, True
        elif up and m < 0.5:
            up = False
    return count


def write_challenge(directory: Path, name: str, packages: tuple[str, ...]) -> None:
    for sub in ("training", "test", "reference"):
        (directory / sub).mkdir(parents=True)
    for record, (bumps, seed) in RECORDS.items():
        x = signal(bumps, seed)
        assert crossings(x) == bumps, f"record {record}: the data does not have one answer"
        sub = "training" if record in TRAINING else "test"
        (directory / sub / f"{record}.txt").write_text("".join(f"{v:.6f}\n" for v in x))
    (directory / "training" / "RECORDS").write_text("\n".join(TRAINING) + "\n")
    (directory / "test" / "RECORDS").write_text("\n".join(TEST) + "\n")
    (directory / "reference" / "REFERENCE.csv").write_text("".join(f"{r},{RECORDS[r][0]}\n" for r in TEST))
    (directory / "challenge.toml").write_text(f"""name = "{name}"
[entry]
required = ["setup.sh", "next.sh", "answers.txt"]
[image]
packages = {json.dumps(list(packages))}
[vm]
vcpus = 1
memory = 1024
home = 256
[limits]
setup = 600
per_record = 600
quiz_total = 3600
exam_total = 3600
[results]
style = "answer-lines"
submitted = "answers.txt"
[score]
scorer = "accuracy"
""")


def stage_figures(doc: dict) -> dict:
    stages = {}
    for a in doc["organiser"]["attempts"]:
        wall = datetime.fromisoformat(a["finished_at"]) - datetime.fromisoformat(a["started_at"])
        m = a["manifest"]
        stages[a["stage"]] = {"wall_s": round(wall.total_seconds(), 2), "boot_s": m.get("boot_seconds"),
                              "run_s": m.get("run_seconds"), "attempt": a["attempt"], "status": a["status"]}
    commands = {}
    for log in ("prep.log", "quiz.log", "exam.log"):
        text = doc["organiser"]["logs"].get(log, {}).get("text", "")
        for name, status, _exit, seconds in STATUS_LINE.findall(text):
            commands[name] = {"status": status, "seconds": float(seconds)}
    per_record = [c["seconds"] for n, c in commands.items() if n.startswith("next.sh ")]
    return {"stages": stages, "commands": commands, "median_record_s": round(statistics.median(per_record), 2)}


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a is not None and b else None


def judge(home: Path, wait: float, kinds: tuple[str, ...] = ("octave", "base")) -> dict:
    """Both challenges written, the entries of `kinds` judged, through the command line; only the
    daemon boots VMs."""
    work = home / "bench"
    work.mkdir()
    write_challenge(work / "octave", "octave-bench", OCTAVE.packages)
    write_challenge(work / "base", "octave-bench-base", ())
    answers = "".join(f"{r},{RECORDS[r][0]}\n" for r in TRAINING)
    archives = {"octave": write_entry(work / "octave-entry.tar.gz", OCTAVE_SETUP, OCTAVE_NEXT, answers),
                "base": write_entry(work / "shell-entry.tar.gz", SHELL_SETUP, SHELL_NEXT, answers)}
    ids = {}
    for kind, name in (("octave", "octave-bench"), ("base", "octave-bench-base")):
        if kind not in kinds:
            continue
        vmjudge(home, "challenge", "add", str(work / kind))
        ids[kind] = int(vmjudge(home, "submit", name, str(archives[kind]), "--owner", kind).stdout)
    def run_daemon() -> float:
        started = time.monotonic()
        vmjudge(home, "daemon", "--slots", "1", "--until-idle", timeout=7200)
        return time.monotonic() - started

    daemon_seconds = with_host("the octave benchmark", wait, run_daemon)
    docs = {kind: json.loads(vmjudge(home, "show", str(i), "--json", "--organiser").stdout) for kind, i in ids.items()}
    for kind, doc in docs.items():
        if (doc["state"], doc["outcome"], doc["scores"].get("score")) != ("done", "scored", 1.0):
            raise SystemExit(f"the {kind} entry (id {doc['id']}) was not scored 1.0: state {doc['state']}, outcome "
                             f"{doc['outcome']}, reason {doc['reason']}, scores {doc['scores']}; its home is kept "
                             f"at {home}.\n{doc['report']}")
    figures = {kind: {"entry": doc["id"], "outcome": doc["outcome"], "scores": doc["scores"], **stage_figures(doc)}
               for kind, doc in docs.items()}
    if "octave" not in figures:  # --smoke: the baseline alone, nothing to compare it with
        figures["daemon_seconds"] = round(daemon_seconds, 1)
        return figures
    o, b = figures["octave"], figures["base"]
    figures["ratio"] = {
        "stages_wall": {s: ratio(o["stages"][s]["wall_s"], b["stages"][s]["wall_s"]) for s in o["stages"]},
        "stages_run": {s: ratio(o["stages"][s]["run_s"], b["stages"][s]["run_s"]) for s in o["stages"]
                       if o["stages"][s]["run_s"] is not None},
        "median_record": ratio(o["median_record_s"], b["median_record_s"]),
        "setup": ratio(o["commands"]["setup.sh"]["seconds"], b["commands"]["setup.sh"]["seconds"])}
    figures["daemon_seconds_both_entries"] = round(daemon_seconds, 1)
    return figures


def main() -> None:
    args, site = parse_args(__doc__, Path("/var/tmp/vmjudge-bench-octave"))
    images = {"base": {**image_figures(site, ImageRecipe(), args.rebuild)[1], "packages": []}}
    if not args.smoke:
        images["octave"] = {**image_figures(site, OCTAVE, args.rebuild)[1], "packages": list(OCTAVE.packages)}
        images["ratio"] = {k: ratio(images["octave"][k], images["base"][k])
                           for k in ("build_seconds", "root_sqfs_bytes", "image_bytes")}
    home = Path(tempfile.mkdtemp(prefix="run-", dir=args.home))
    os.chmod(home, 0o711)  # libvirt's qemu crosses it to the entries' disks
    (home / "images").symlink_to(site.layout.images)
    figures = judge(home, args.wait_for_host, ("base",) if args.smoke else ("octave", "base"))
    if not args.keep:
        shutil.rmtree(home)
    print(json.dumps({
        "benchmark": "octave", "smoke": args.smoke, "accel": site.accel, "date": time.strftime("%Y-%m-%d"),
        "host": {"node": platform.node(), "cpus": os.cpu_count()},
        "images": images, "judge": figures,
        "records": {"training": len(TRAINING), "test": len(TEST), "samples": SAMPLES},
    }, indent=2))


if __name__ == "__main__":
    main()
