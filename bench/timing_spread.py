"""Benchmark: how much a record's time varies between runs of the same CPU-bound entry, with
one slot busy and with two (JSON on stdout; #20, comparable timings).

An "entry" is a job of a few records, each a pure-Python loop of fixed work (`python3 -c`,
timed inside the guest with perf_counter, so boot and start-up are not in it). It runs
`--runs` times in slot 0 of a one-slot plan, then `--runs` times in slot 0 of a two-slot plan
while slot 1 runs the same records plus one more (so slot 1 is busy for as long as slot 0
is measured). VMs have 1 vCPU, so two slots fit two cores without overcommit, each pinned to
its own core as the daemon pins them (vm/pinning.py). With --unpinned the two-slot rounds
run once more with no <cputune> at all, for comparison. Per record: min, max and spread =
max/min, over the runs.

--smoke: one run of each mode and 100 000 and 200 000 steps: three VMs, every record must end ok
(what the test suite runs; the spreads of one run say nothing).

Usage: python bench/timing_spread.py [--smoke] [--home DIR] [--runs 5] [--work 1500000,3000000] [--unpinned]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.host_lock import run_holding_host, trial_guests
from vmjudge.config import ImageRecipe, load_site
from vmjudge.config.layout import RunDir
from vmjudge.images.build import build_image
from vmjudge.vm import domain
from vmjudge.vm.job import Command, Job
from vmjudge.vm.pinning import SlotCores, plan_cores, usable_cores
from vmjudge.vm.runner import make_blank_disk, run_job

BURN = "import time\nt=time.perf_counter()\nn={n}\nwhile n:\n    n-=1\nprint(time.perf_counter()-t)\n"


def job(work: list[int]) -> Job:
    return Job(commands=tuple(Command(f"r{i}", ("python3", "-c", BURN.format(n=n)), 900) for i, n in enumerate(work)))


def one_run(conn, site, image, rd: Path, label: str, work: list[int], cores: SlotCores | None) -> list[float]:
    home = rd / f"{label}.qcow2"
    make_blank_disk(home, 64)
    try:
        run = run_job(conn, site, image, job(work), home_disk=home, workdir=rd, console_log=rd / f"{label}.log",
                      vcpus=1, memory_mib=384, label=f"bench-spread-{label}", cores=cores)
    finally:
        home.unlink(missing_ok=True)
    times = []
    for cmd in run.transcript.commands:
        if cmd.status != "ok":
            raise RuntimeError(f"record {cmd.name} ended {cmd.status}: {bytes(cmd.output)[:200]!r}")
        times.append(float(bytes(cmd.output).decode()))
    return times


def stats(samples: list[list[float]], work: list[int]) -> list[dict]:
    out = []
    for i, n in enumerate(work):
        values = [run[i] for run in samples]
        out.append({"record": f"r{i}", "loop_iterations": n, "seconds": [round(v, 3) for v in values],
                    "min": round(min(values), 3), "max": round(max(values), 3),
                    "spread": round(max(values) / min(values), 3)})
    return out


def two_slots(conn, site, image, rd: Path, tag: str, n: int, work: list[int],
              cores: tuple[SlotCores | None, SlotCores | None]) -> list[float]:
    """Slot 0 measured while slot 1 runs the same records and one more, started together."""
    with ThreadPoolExecutor(2) as pool:
        other = pool.submit(one_run, conn, site, image, rd, f"{tag}{n}-s1", work + [max(work)], cores[1])
        measured = one_run(conn, site, image, rd, f"{tag}{n}-s0", work, cores[0])
        other.result()
    return measured


def arguments() -> argparse.ArgumentParser:
    """Its options, parsed before the host is taken (run_holding_host)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--home", type=Path, default=Path(os.environ.get("VMJUDGE_TEST_HOME", "/var/tmp/vmjudge-test")))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--work", default="1500000,3000000", help="loop iterations of each record, comma-separated")
    ap.add_argument("--unpinned", action="store_true", help="also two slots with no pinning, for comparison")
    ap.add_argument("--smoke", action="store_true", help="one run of each mode, little work: three VMs")
    return ap


def main(args: argparse.Namespace) -> None:
    if args.smoke:
        args.runs, args.work = 1, "100000,200000"
    work = [int(w) for w in args.work.split(",")]
    trial_guests()
    site = load_site(args.home)
    image = build_image(site, ImageRecipe(), progress=lambda m: print(m, file=sys.stderr))
    usable = usable_cores()
    one, two = plan_cores(usable, 1, 1, overcommit=False), plan_cores(usable, 2, 1, overcommit=False)
    conn = domain.connect(site.uri)
    modes: dict[str, dict] = {}
    try:
        with RunDir(site.layout, "bench-spread") as rd_obj:
            rd = rd_obj.path
            runs = []
            for n in range(args.runs):
                runs.append(one_run(conn, site, image, rd, f"one{n}", work, one.of(0)))
                print(f"1 slot, run {n}: {runs[-1]}", file=sys.stderr)
            modes["pinned_1_slot"] = {"slot0_cores": list(one.of(0).cores), "records": stats(runs, work)}
            variants: list[tuple[str, tuple[SlotCores | None, SlotCores | None]]] = [
                ("pinned_2_slots_busy", (two.of(0), two.of(1)))]
            if args.unpinned:
                variants.append(("unpinned_2_slots_busy", (None, None)))
            for name, cores in variants:
                runs = []
                for n in range(args.runs):
                    runs.append(two_slots(conn, site, image, rd, name[:2], n, work, cores))
                    print(f"{name}, run {n}: {runs[-1]}", file=sys.stderr)
                modes[name] = {"slot0_cores": list(cores[0].cores) if cores[0] else "any",
                               "slot1_cores": list(cores[1].cores) if cores[1] else "any",
                               "records": stats(runs, work)}
    finally:
        conn.close()
    print(json.dumps({"benchmark": "timing_spread", "smoke": args.smoke, "accel": site.accel, "host": platform.node(),
                      "usable_cores": list(usable), "runs": args.runs, "vcpus_per_vm": 1,
                      "timed": "inside the guest (perf_counter around the loop)", "modes": modes}, indent=2))


if __name__ == "__main__":
    run_holding_host(main, arguments())
