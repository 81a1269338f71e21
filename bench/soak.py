"""Soak test: mixed entries, the daemon killed with SIGKILL at random moments, restarted;
every entry must end with the same outcome and scores as in an undisturbed run (JSON out).

Uses the hostile corpus's small challenge (tests/hostile) so a run takes minutes, with a
mix of entries that score, fail in each stage, and time out, every one an archive that
`submit` accepts (MIX). The corpus's archives that `submit` refuses (REFUSED) are submitted
too, once in each run's home: each must be refused, saying why, with nothing queued for it.

Checked (exit 1 with a sentence after the JSON otherwise, both homes kept): the same outcome
and scores for every entry in both runs, every entry done, the refused archives refused, and
nothing left over: no vmj- libvirt domain, no run directory in either home.

--smoke: 2 entries (one failing in its quiz, after two VM stages, and one failing on the host) and
1 SIGKILL, the same checks: what the test suite runs. Not part of CI's default run at full size.

Usage: python bench/soak.py [--smoke] [--home DIR] [--entries 20] [--kills 5] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.host_lock import run_holding_host, trial_guests  # noqa: E402
from tests.hostile.cases import CASES  # noqa: E402
from vmjudge.config.layout import Layout  # noqa: E402
from vmjudge.queue.db import Queue  # noqa: E402

CHALLENGE = REPO / "tests" / "hostile" / "challenge"
# Entries that submit accepts and that end in every kind of verdict (a score, or a failure in
# each stage, in a VM or on the host), in the order taken.
MIX = ("no-exec-bit", "corrupts-answers", "zip-corrupt-lzma", "never-exits", "eats-memory", "fills-home",
       "prints-100mb", "writes-devices")
# Archives that submit refuses (what stage 1 would refuse on the host: #58's checks at upload).
REFUSED = ("zip-bomb-size", "zip-bomb-ratio", "missing-next", "crlf-scripts")
SMOKE_MIX = ("corrupts-answers", "zip-corrupt-lzma")
CASE = {c.name: c for c in CASES}


def cli(home: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "vmjudge.cli", *args], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "VMJUDGE_HOME": str(home)})
    if check and proc.returncode != 0:
        raise SystemExit(f"vmjudge {' '.join(args)} failed ({proc.returncode}) in {home}:\n{proc.stderr}")
    return proc


def queued(home: Path) -> int:
    return len(Queue(Layout(home).queue_db).entries())


def refused(home: Path, name: str) -> bool:
    """Submits the corpus's archive `name`, which submit must refuse saying why, queueing nothing."""
    work = home / "archives" / name
    work.mkdir(parents=True)
    before = queued(home)
    proc = cli(home, "submit", "hostile", str(CASE[name].build(work)), "--owner", name, check=False)
    return proc.returncode == 1 and CASE[name].says in proc.stderr and queued(home) == before


def prepare(base: Path, label: str, mix: tuple[str, ...]) -> tuple[Path, list[int], dict[str, bool]]:
    """A home of its own with the corpus's entries `mix` queued, and whether each refused archive was refused."""
    home = Path(tempfile.mkdtemp(prefix=f"soak-{label}-", dir=base))
    os.chmod(home, 0o711)
    Layout(home).images.symlink_to(Layout(base).images)
    cli(home, "challenge", "add", str(CHALLENGE))
    ids = []
    for i, name in enumerate(mix):
        case = CASE[name]
        work = home / "archives" / f"{i}"
        work.mkdir(parents=True)
        ids.append(int(cli(home, "submit", "hostile", str(case.build(work)), "--owner", case.name).stdout))
    return home, ids, {name: refused(home, name) for name in REFUSED}


def run_dirs_left(home: Path) -> list[str]:
    runs = Layout(home).runs
    return sorted(p.name for p in runs.iterdir()) if runs.is_dir() else []


def verdicts(home: Path, ids: list[int]) -> dict[int, tuple]:
    out = {}
    for i in ids:
        # the organiser's view: the whole verdict at once, not from the exam's publish time
        doc = json.loads(cli(home, "show", str(i), "--json", "--organiser").stdout)
        out[i] = (doc["state"], doc["outcome"], doc["failed_stage"], doc["reason"],
                  json.dumps(doc["scores"], sort_keys=True), json.dumps(doc["exam"], sort_keys=True))
    return out


def arguments() -> argparse.ArgumentParser:
    """Its options, parsed before the host is taken (run_holding_host)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--home", type=Path, default=Path(os.environ.get("VMJUDGE_TEST_HOME", "/var/tmp/vmjudge-test")))
    ap.add_argument("--entries", type=int, default=20)
    ap.add_argument("--kills", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--smoke", action="store_true", help="2 entries and 1 SIGKILL, the same checks")
    return ap


def main(args: argparse.Namespace) -> None:
    trial_guests()
    if args.smoke:
        args.entries, args.kills = len(SMOKE_MIX), 1
    mix = SMOKE_MIX if args.smoke else tuple(MIX[i % len(MIX)] for i in range(args.entries))
    rng = random.Random(args.seed)

    calm, calm_ids, calm_refused = prepare(args.home, "calm", mix)
    t0 = time.monotonic()
    cli(calm, "daemon", "--slots", "2", "--until-idle")
    calm_s = time.monotonic() - t0
    expected = verdicts(calm, calm_ids)

    rough, rough_ids, rough_refused = prepare(args.home, "rough", mix)
    t0 = time.monotonic()
    kills = []
    for _ in range(args.kills):
        daemon = subprocess.Popen([sys.executable, "-m", "vmjudge.cli", "daemon", "--slots", "2", "--until-idle"],
                                  cwd=REPO, env={**os.environ, "VMJUDGE_HOME": str(rough)},
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # Within the calm run's time, so that there is a daemon to kill (a smoke run's stages took 4.5 s in all).
        delay = rng.uniform(0.2, 0.8) * calm_s / args.kills
        try:
            daemon.wait(timeout=delay)
            kills.append({"after_s": round(delay, 1), "killed": False})
        except subprocess.TimeoutExpired:
            daemon.send_signal(signal.SIGKILL)
            daemon.wait()
            kills.append({"after_s": round(delay, 1), "killed": True})
    cli(rough, "daemon", "--slots", "2", "--until-idle")
    rough_s = time.monotonic() - t0
    got = verdicts(rough, rough_ids)

    mismatches = [{"entry": i, "calm": expected[c], "rough": got[i]}
                  for c, i in zip(calm_ids, rough_ids, strict=True) if expected[c] != got[i]]
    listed = subprocess.run(["virsh", "-c", "qemu:///system", "list", "--all", "--name"], capture_output=True,
                            text=True).stdout.split()
    result = {
        "benchmark": "soak", "smoke": args.smoke, "entries": args.entries, "seed": args.seed, "kills": kills,
        "mix": list(mix),
        "undisturbed_s": round(calm_s, 1), "disturbed_s": round(rough_s, 1),
        "same_outcomes": not mismatches, "mismatches": mismatches,
        "all_done": all(v[0] == "done" for v in [*expected.values(), *got.values()]),
        "refused_and_nothing_queued": {name: calm_refused[name] and rough_refused[name] for name in REFUSED},
        "leftover_domains": [d for d in listed if d.startswith("vmj-")],
        "leftover_run_dirs": run_dirs_left(calm) + run_dirs_left(rough),
    }
    print(json.dumps(result, indent=2))
    problems = {"an outcome differs between the runs": result["same_outcomes"] is False,
                "an entry is not done": not result["all_done"],
                "a refused archive was not refused, or something was queued for it":
                    not all(result["refused_and_nothing_queued"].values()),
                "a vmj- domain is left": bool(result["leftover_domains"]),
                "a run directory is left": bool(result["leftover_run_dirs"])}
    failed = [what for what, bad in problems.items() if bad]
    if failed:
        sys.exit(f"bench/soak.py: {'; '.join(failed)} (see the JSON above); the homes are kept: {calm}, {rough}.")
    shutil.rmtree(calm)
    shutil.rmtree(rough)


if __name__ == "__main__":
    run_holding_host(main, arguments())
