"""Benchmark: the daemon's peak memory does not grow with what an exam's entry prints.

For exams of 50, 200 and 800 test records, one entry whose next.sh prints 1 MiB of 0xFF bytes
per record (the most output a command may keep by default), and as the baseline in the same
run the same entry printing nothing; each is evaluated by `vmjudge daemon --until-idle` in a
fresh home, and the daemon's peak resident memory (ru_maxrss of the daemon, read by a small
parent once it has exited) is reported. Target: the ratio printing/silent stays flat as the
records grow (before issue 11 the daemon kept every command's output: +504 MiB for 100 records).

--smoke: one exam of 2 records, each entry once: the same checks (scored, every record completed),
what the test suite runs.

JSON on stdout. Usage: python bench/hostile_memory.py [--smoke] [--records 50,200,800]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.host_lock import HostBusy, exclusive_host, trial_guests  # noqa: E402
from tests.hostile.cases import NEXT_SH, WIDE_NEXT, tar_of, wide_challenge  # noqa: E402
from vmjudge.config import load_site  # noqa: E402
from vmjudge.config.layout import Layout  # noqa: E402

PEAK_RSS = ("import resource, subprocess, sys; rc = subprocess.call(sys.argv[1:]); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(rc)")


def vmjudge(home: Path, *args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "vmjudge.cli", *args], capture_output=True, text=True,
                          env={**os.environ, "VMJUDGE_HOME": str(home)}, cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(f"vmjudge {' '.join(args)} failed: {proc.stderr}")
    return proc


def one_run(base: Path, images: Path, records: int, next_sh: str) -> dict:
    home = Path(tempfile.mkdtemp(prefix="bench-mem-", dir=base))
    os.chmod(home, 0o711)
    try:
        Layout(home).images.symlink_to(images)
        vmjudge(home, "challenge", "add", str(wide_challenge(home / "challenge", records)))
        archive = tar_of({"next.sh": next_sh.encode()}, home / "entry.tar.gz")
        entry_id = vmjudge(home, "submit", "hostile-wide", str(archive), "--owner", "bench").stdout.strip()
        started = time.monotonic()
        proc = subprocess.run([sys.executable, "-c", PEAK_RSS, sys.executable, "-m", "vmjudge.cli", "daemon",
                               "--until-idle"], capture_output=True, text=True,
                              env={**os.environ, "VMJUDGE_HOME": str(home)}, cwd=REPO)
        seconds = time.monotonic() - started
        if proc.returncode != 0:
            raise SystemExit(f"the daemon failed: {proc.stderr}")
        # the organiser's view: the whole verdict at once, not from the exam's publish time
        doc = json.loads(vmjudge(home, "show", entry_id, "--json", "--organiser").stdout)
        if doc["outcome"] != "scored" or doc["exam"]["completed"] != records:
            raise SystemExit(f"the entry was not scored whole: {doc['report']}")
        log = Layout(home).results_of(int(entry_id)).stage_log("exam")
        return {"peak_rss_mib": round(int(proc.stderr.strip().splitlines()[-1]) / 1024, 1),
                "exam_log_mib": round(log.stat().st_size / (1 << 20), 1), "seconds": round(seconds, 1)}
    finally:
        shutil.rmtree(home, ignore_errors=True)


def measure(base: Path, images: Path, records: int) -> dict:
    """The silent baseline and the printing entry, back to back."""
    silent = one_run(base, images, records, NEXT_SH)
    printing = one_run(base, images, records, WIDE_NEXT)
    row = {"records": records, "silent": silent, "printing_1mib": printing,
           "ratio": round(printing["peak_rss_mib"] / silent["peak_rss_mib"], 3), "printed_mib": records}
    print(json.dumps(row), file=sys.stderr)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", default="50,200,800")
    parser.add_argument("--home", type=Path, default=Path(os.environ.get("VMJUDGE_TEST_HOME", "/var/tmp/vmjudge-test")))
    parser.add_argument("--smoke", action="store_true", help="one exam of 2 records (two entries, six VM stages)")
    args = parser.parse_args()
    if args.smoke:
        args.records = "2"
    trial_guests()
    site = load_site(args.home)
    site.layout.ensure()
    rows = []
    try:
        with exclusive_host("this benchmark"):
            rows.extend(measure(args.home, site.layout.images, int(x)) for x in args.records.split(","))
    except HostBusy as exc:
        raise SystemExit(str(exc)) from None
    ratios = [r["ratio"] for r in rows]

    print(json.dumps({"benchmark": "hostile_memory", "smoke": args.smoke, "host": platform.node(), "accel": site.accel,
                      "date": time.strftime("%Y-%m-%d"), "runs": rows,
                      "ratio_spread": round(max(ratios) - min(ratios), 3),
                      "target": "ratio printing/silent flat as records grow (spread <= 0.1)"}, indent=1))


if __name__ == "__main__":
    main()
