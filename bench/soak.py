"""Soak test: mixed entries, the daemon killed with SIGKILL at random moments, restarted;
every entry must end with the same outcome and scores as in an undisturbed run (JSON out).

Uses the hostile corpus's small challenge (tests/hostile) so a run takes minutes, with a
mix of entries that score, fail in each stage, and time out. Not part of CI's default run.

Usage: python bench/soak.py [--home DIR] [--entries 20] [--kills 5] [--seed 1]
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

from tests.host_lock import run_holding_host  # noqa: E402
from tests.hostile.cases import CASES  # noqa: E402
from vmjudge.config.layout import Layout  # noqa: E402

CHALLENGE = REPO / "tests" / "hostile" / "challenge"
# Entries that reach VMs and end in every kind of verdict (a score, or a failure in each stage).
MIX = ("no-exec-bit", "never-exits", "eats-memory", "fills-home", "prints-100mb", "corrupts-answers",
       "writes-devices", "missing-next", "zip-bomb-size", "crlf-scripts")


def cli(home: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vmjudge.cli", *args], cwd=REPO, check=check, capture_output=True,
                          text=True, env={**os.environ, "VMJUDGE_HOME": str(home)})


def prepare(base: Path, label: str, n: int) -> tuple[Path, list[int]]:
    home = Path(tempfile.mkdtemp(prefix=f"soak-{label}-", dir=base))
    os.chmod(home, 0o711)
    Layout(home).images.symlink_to(Layout(base).images)
    cli(home, "challenge", "add", str(CHALLENGE))
    by_name = {c.name: c for c in CASES}
    ids = []
    for i in range(n):
        case = by_name[MIX[i % len(MIX)]]
        work = home / "archives" / f"{i}"
        work.mkdir(parents=True)
        ids.append(int(cli(home, "submit", "hostile", str(case.build(work)), "--owner", case.name).stdout))
    return home, ids


def verdicts(home: Path, ids: list[int]) -> dict[int, tuple]:
    out = {}
    for i in ids:
        doc = json.loads(cli(home, "show", str(i), "--json").stdout)
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
    return ap


def main(args: argparse.Namespace) -> None:
    os.environ.setdefault("VMJUDGE_ACCEL", "tcg")
    rng = random.Random(args.seed)

    calm, calm_ids = prepare(args.home, "calm", args.entries)
    t0 = time.monotonic()
    cli(calm, "daemon", "--slots", "2", "--until-idle")
    calm_s = time.monotonic() - t0
    expected = verdicts(calm, calm_ids)

    rough, rough_ids = prepare(args.home, "rough", args.entries)
    t0 = time.monotonic()
    kills = []
    for _ in range(args.kills):
        daemon = subprocess.Popen([sys.executable, "-m", "vmjudge.cli", "daemon", "--slots", "2", "--until-idle"],
                                  cwd=REPO, env={**os.environ, "VMJUDGE_HOME": str(rough)},
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        delay = rng.uniform(5, calm_s / (args.kills + 1))
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
    leftovers = subprocess.run(["virsh", "-c", "qemu:///system", "list", "--name"], capture_output=True,
                               text=True).stdout.split()
    print(json.dumps({
        "benchmark": "soak", "entries": args.entries, "seed": args.seed, "kills": kills,
        "undisturbed_s": round(calm_s, 1), "disturbed_s": round(rough_s, 1),
        "same_outcomes": not mismatches, "mismatches": mismatches,
        "all_done": all(v[0] == "done" for v in got.values()),
        "leftover_domains": [d for d in leftovers if d.startswith("vmj-")],
    }, indent=2))
    shutil.rmtree(calm)
    shutil.rmtree(rough)
    sys.exit(0 if not mismatches else 1)


if __name__ == "__main__":
    run_holding_host(main, arguments())
