"""Benchmark: `make demo`'s verdicts with every core kept busy by CPU hogs outside the VMs,
compared with the verdicts the demo must give (JSON out; exit 1 on any difference).

The demo judges each example challenge's sample entries with two slots; a verdict that turns
on the host's load (a per-record limit with no margin under TCG) shows here as a difference.
It also reports each example's slowest record under load, quiz and exam, against its limit:
the margin an organiser's limits need (#32: at least 4x).

--smoke: af2017's dry-run entry only (its prep and quiz), one hog at nice 19.

Usage: python bench/demo_under_load.py [--smoke] [--home DIR] [--hogs N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.example_cases import CASES as EXPECTED  # noqa: E402
from tests.host_lock import run_holding_host, trial_guests  # noqa: E402
from vmjudge.config import load_challenge  # noqa: E402
from vmjudge.config.layout import Layout  # noqa: E402

EXAMPLES = ("beats2014", "af2017", "alarms2015")
SMOKE = {"af2017": ("dryrun",)}
HOG = "while True:\n    pass\n"


def cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vmjudge.cli", *args], cwd=REPO, check=True, capture_output=True,
                          text=True, env={**os.environ, "VMJUDGE_HOME": str(home)})


def submit_all(home: Path, cases: dict[str, tuple[str, ...]]) -> dict[int, tuple[str, str]]:
    ids = {}
    for example, names in cases.items():
        cli(home, "challenge", "add", str(REPO / "examples" / example))
        for case in names:
            archive = home / "archives" / f"{example}-{case}-entry.tar.gz"  # submit asks for entry.tar.gz
            archive.parent.mkdir(exist_ok=True)
            with tarfile.open(archive, "w:gz") as tar:
                tar.add(REPO / "examples" / example / "entries" / case, arcname=".")
            ids[int(cli(home, "submit", example, str(archive), "--owner", case).stdout)] = (example, case)
    return ids


def stage_nodes(doc: Any, stage: str | None = None) -> Iterator[tuple[str, dict]]:
    """Every table of an organiser's show inside its quiz or its exam, with that stage's name."""
    if isinstance(doc, dict):
        stage = doc["stage"] if isinstance(doc.get("stage"), str) else stage
        if stage in ("quiz", "exam"):
            yield stage, doc
        for value in doc.values():
            yield from stage_nodes(value, stage)
    elif isinstance(doc, list):
        for value in doc:
            yield from stage_nodes(value, stage)


def record_times(doc: Any) -> list[tuple[str, float]]:
    """(stage, seconds) of every record command: its quiz and exam runs."""
    return [(stage, float(r["seconds"])) for stage, node in stage_nodes(doc)
            for r in node.get("commands", []) if isinstance(r, dict) and isinstance(r.get("seconds"), (int, float))]


def stage_times(doc: Any) -> list[tuple[str, float, float]]:
    """(stage, seconds, limit) of the quiz and the exam as a whole: the stage caps need their margin too."""
    number = (int, float)
    return [(stage, float(node["stage_seconds"]), float(node["stage_limit"])) for stage, node in stage_nodes(doc)
            if isinstance(node.get("stage_seconds"), number) and isinstance(node.get("stage_limit"), number)]


def main(args: argparse.Namespace) -> None:
    trial_guests()
    cases = SMOKE if args.smoke else {ex: tuple(EXPECTED) for ex in EXAMPLES}
    if args.hogs is None:
        args.hogs = 1 if args.smoke else os.cpu_count() or 2
    home = Path(tempfile.mkdtemp(prefix="demo-load-", dir=args.home))
    os.chmod(home, 0o711)
    Layout(home).images.symlink_to(Layout(args.home).images)  # the images the tests and demo built
    (home / "site.toml").write_text("[slots]\novercommit = true\n")  # as the demo's
    # The smoke run's hog yields to everything (nice 19): it runs the code, not the load, whose verdicts
    # turn on the examples' limits and so are the full run's to judge, not the suite's.
    nice = ["nice", "-n", "19"] if args.smoke else []
    hogs = [subprocess.Popen([*nice, sys.executable, "-c", HOG]) for _ in range(args.hogs)]
    try:
        ids = submit_all(home, cases)
        started = time.monotonic()
        cli(home, "daemon", "--slots", "2", "--until-idle")
        seconds = time.monotonic() - started
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    differences, slowest = [], {}
    totals: dict[tuple[str, str], tuple[float, float]] = {}
    for entry_id, (example, case) in sorted(ids.items()):
        doc = json.loads(cli(home, "show", str(entry_id), "--json", "--organiser").stdout)
        got = (doc.get("outcome"), doc.get("failed_stage"), doc.get("reason"))
        if got != EXPECTED[case]:
            differences.append({"example": example, "case": case, "expected": EXPECTED[case], "got": got})
        if case in ("good", "dryrun"):
            for stage, secs in record_times(doc):
                slowest[example, stage] = max(slowest.get((example, stage), 0.0), secs)
            for stage, secs, limit in stage_times(doc):
                worst = totals.get((example, stage), (0.0, limit))
                totals[example, stage] = max(worst, (secs, limit))
    limits = {ex: load_challenge(REPO / "examples" / ex).limits.per_record for ex in cases}
    print(json.dumps({
        "benchmark": "demo_under_load", "smoke": args.smoke, "hogs": args.hogs, "cpus": os.cpu_count(),
        "entries": len(ids), "daemon_seconds": round(seconds, 1),
        "slowest_record_s": {f"{ex}/{stage}": round(s, 2) for (ex, stage), s in sorted(slowest.items())},
        "per_record_limit_s": limits,
        "margin": {f"{ex}/{stage}": round(limits[ex] / s, 2) for (ex, stage), s in sorted(slowest.items()) if s},
        "slowest_stage_s": {f"{ex}/{stage}": round(s, 2) for (ex, stage), (s, _) in sorted(totals.items())},
        "stage_margin": {f"{ex}/{stage}": round(limit / s, 2) for (ex, stage), (s, limit) in sorted(totals.items())
                         if s},
        "differences": differences, "met": not differences,
    }, indent=2))
    if not differences:
        shutil.rmtree(home)
    else:
        print(f"the verdicts differ; the home is kept: {home}", file=sys.stderr)
        raise SystemExit(1)


def arguments() -> argparse.ArgumentParser:
    """Its options, parsed before the host is taken (run_holding_host)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--home", type=Path, default=Path(os.environ.get("VMJUDGE_TEST_HOME", "/var/tmp/vmjudge-test")))
    ap.add_argument("--hogs", type=int, default=None,
                    help="busy loops outside the VMs (default: a core each; --smoke: 1)")
    ap.add_argument("--smoke", action="store_true", help="af2017's dry-run entry, one hog")
    return ap


if __name__ == "__main__":
    run_holding_host(main, arguments())
