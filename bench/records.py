"""Benchmark: the pipeline's own costs, each against a baseline in the same run (JSON on stdout).

- per_record: in ONE VM, the af2017 good entry's next.sh over the test records: a warm-up loop
  (so both measured runs find Python and numpy in the page cache), then the way the quiz and
  exam run it (one agent command per record, with links, output capture, the kill sweep and
  the frames), then a plain shell loop (one command). Host-side times of the commands' start
  and end frames. Target: agent / loop <= 1.2.
- throughput: N good entries through the daemon with 1 slot, then N more with 2 slots
  (fresh queue each time). Target: entries/hour with 2 slots >= 1.7 x with 1 slot.

--smoke: the hostile corpus's small challenge and its good entry (the base image; a stage in
little more than a boot) instead of the example, 1 entry on 2 slots only (no ratio); the same
checks (every command ok, every entry scored): what the test suite runs.

Usage: python bench/records.py [--smoke] [--home DIR] [--entries 4] [--example af2017]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.host_lock import run_holding_host, trial_guests  # noqa: E402
from vmjudge.config import load_challenge, load_site  # noqa: E402
from vmjudge.config.layout import Layout, RunDir  # noqa: E402
from vmjudge.images.build import build_image  # noqa: E402
from vmjudge.stages.context import script_argv  # noqa: E402
from vmjudge.vm import domain  # noqa: E402
from vmjudge.vm.job import Command, Job  # noqa: E402
from vmjudge.vm.runner import make_blank_disk, run_job  # noqa: E402


def span(timeline, first: int, last: int) -> float:
    """Seconds from the start frame of command `first` to the end frame of command `last`."""
    starts = [at for _seq, kind, at in timeline if kind == "start"]
    ends = [at for _seq, kind, at in timeline if kind == "end"]
    return ends[last] - starts[first]


def per_record(site, example: Path, entry: Path) -> dict:
    ch = load_challenge(example)
    image = build_image(site, ch.image, progress=lambda m: print(m, file=sys.stderr))
    records = ch.test
    media = {"entry": entry}
    links = []
    for r in records:
        for f in ch.record_files("test", r):
            media[f"test/{f.name}"] = f
            links.append(f"test/{f.name}")
    loop = ("sh", "-c", "for r in \"$@\"; do if [ -x ./next.sh ]; then ./next.sh \"$r\"; else bash ./next.sh \"$r\"; "
            "fi; done", "loop", *records)
    reset = Command("reset", ("rm", "-f", "answers.txt"), 30)
    commands = [Command("warm-up", loop, 600, links=tuple(links)), reset]
    for r in records:
        mine = tuple(f"test/{f.name}" for f in ch.record_files("test", r))
        commands.append(Command(f"next.sh {r}", script_argv("next.sh", r), ch.limits.per_record, links=mine,
                                collect=("answers.txt",)))
    commands += [reset, Command("loop", loop, 600, links=tuple(links))]
    conn = domain.connect(site.uri)
    with RunDir(site.layout, "bench-records") as rd:
        make_blank_disk(rd.path / "home.qcow2", 256)
        run = run_job(conn, site, image, Job(commands=tuple(commands), media=media, install="entry"),
                      home_disk=rd.path / "home.qcow2", workdir=rd.path, console_log=rd.path / "console.log",
                      vcpus=1, memory_mib=1024, label="bench-records")
    conn.close()
    statuses = {c.name: c.status for c in run.transcript.commands}
    assert all(s == "ok" for s in statuses.values()), statuses
    n = len(records)
    agent_s = span(run.transcript.timeline, 2, 2 + n - 1)
    loop_s = span(run.transcript.timeline, len(commands) - 1, len(commands) - 1)
    return {"records": len(records), "loop_s": round(loop_s, 3), "agent_s": round(agent_s, 3),
            "overhead_per_record_ms": round(1000 * (agent_s - loop_s) / len(records), 1),
            "ratio": round(agent_s / loop_s, 3), "target": 1.2, "met": agent_s / loop_s <= 1.2}


def throughput(base_home: Path, example: Path, entry: Path, n: int, slots: int) -> float:
    home = Path(tempfile.mkdtemp(prefix=f"bench-{slots}slot-", dir=base_home))
    os.chmod(home, 0o711)
    Layout(home).images.symlink_to(Layout(base_home).images)
    env = {**os.environ, "VMJUDGE_HOME": str(home)}

    def cli(*args: str) -> str:
        return subprocess.run([sys.executable, "-m", "vmjudge.cli", *args], env=env, cwd=REPO, check=True,
                              capture_output=True, text=True).stdout

    try:
        cli("challenge", "add", str(example))
        archive = home / "good-entry.tar.gz"
        with tarfile.open(archive, "w:gz") as tar:
            for p in sorted(entry.rglob("*")):
                tar.add(p, arcname=str(p.relative_to(entry)), recursive=False)
        name = load_challenge(example).name
        ids = [cli("submit", name, str(archive), "--owner", f"o{i}").strip() for i in range(n)]
        started = time.monotonic()
        cli("daemon", "--slots", str(slots), "--until-idle")
        seconds = time.monotonic() - started
        for i in ids:
            doc = json.loads(cli("show", i, "--json", "--organiser"))  # at once, not from the publish time
            assert doc["outcome"] == "scored", doc["report"]
        return seconds
    finally:
        shutil.rmtree(home)


def arguments() -> argparse.ArgumentParser:
    """Its options, parsed before the host is taken (run_holding_host)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--home", type=Path, default=Path(os.environ.get("VMJUDGE_TEST_HOME", "/var/tmp/vmjudge-test")))
    ap.add_argument("--entries", type=int, default=4)
    ap.add_argument("--example", default="af2017")
    ap.add_argument("--smoke", action="store_true", help="the hostile corpus's small challenge, 1 entry on 2 slots")
    return ap


def main(args: argparse.Namespace) -> None:
    trial_guests()
    site = load_site(args.home)
    if args.smoke:
        args.example, args.entries = "hostile", 1
        example, entry = REPO / "tests" / "hostile" / "challenge", REPO / "tests" / "hostile" / "good"
    else:
        example = REPO / "examples" / args.example
        entry = example / "entries" / "good"
    rec = per_record(site, example, entry)
    two = throughput(args.home, example, entry, args.entries, 2)
    if args.smoke:  # one entry on two slots runs the same code as on one: the ratio is the full run's
        speed = {"entries": args.entries, "two_slots_s": round(two, 1)}
    else:
        one = throughput(args.home, example, entry, args.entries, 1)
        per_hour_1, per_hour_2 = 3600 * args.entries / one, 3600 * args.entries / two
        speed = {"entries": args.entries, "one_slot_s": round(one, 1), "two_slots_s": round(two, 1),
                 "entries_per_hour_1": round(per_hour_1, 1), "entries_per_hour_2": round(per_hour_2, 1),
                 "speedup": round(per_hour_2 / per_hour_1, 3), "target": 1.7, "met": per_hour_2 / per_hour_1 >= 1.7}
    print(json.dumps({
        "benchmark": "records", "smoke": args.smoke, "accel": site.accel, "host": platform.node(),
        "cpus": os.cpu_count(), "example": args.example, "per_record": rec, "throughput": speed,
    }, indent=2))


if __name__ == "__main__":
    run_holding_host(main, arguments())
