"""Benchmark: what a submission's whole-set run costs beside the same command run directly (#60). JSON on stdout.

In ONE VM of examples/drivendata-style's runtime, with the benchmark submission installed and the test set
in its code directory's data (as the exam gives them):
- run: `python3 main.py` the way the quiz and the exam run it (the agent's command, its output relayed, the
  kill sweep, submission.csv sent back), timed by the host from its start frame to its end frame;
- direct: the same command in a shell that times it itself (`date` before and after, in the guest): what
  running it by hand in the runtime would take.
The first run warms the page cache for both. Target: run / direct <= 1.2. Then on the host, the format check
of a submission of `--rows` rows (24 columns, DrivenData's of this example), against its format: its
seconds, and the host's bytes of the submission it reads.

--smoke: the same with one measured run each and a format check of 1000 rows: what the test suite runs.

Usage: python bench/submission.py [--smoke] [--home DIR] [--rows 100000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.host_lock import run_holding_host, trial_guests  # noqa: E402
from vmjudge.config import load_challenge, load_site  # noqa: E402
from vmjudge.config.layout import RunDir  # noqa: E402
from vmjudge.config.submission import read_format  # noqa: E402
from vmjudge.images.build import build_image  # noqa: E402
from vmjudge.stages.submission import submission_set_media  # noqa: E402
from vmjudge.stages.submission_check import check_submission  # noqa: E402
from vmjudge.vm import domain  # noqa: E402
from vmjudge.vm.job import CodeDir, Command, Job  # noqa: E402
from vmjudge.vm.runner import make_blank_disk, run_job  # noqa: E402

EXAMPLE = REPO / "examples" / "drivendata-style"
TIMED = "s=$(date +%s.%N); python3 main.py >/dev/null; e=$(date +%s.%N); echo \"direct $s $e\""


def in_vm(site, repeat: int) -> dict:
    ch = load_challenge(EXAMPLE)
    assert ch.submission is not None
    image = build_image(site, ch.image, progress=lambda m: print(m, file=sys.stderr))
    run = Command("run", ("python3", "main.py"), 600, collect=(ch.submission.output,), file_limit=16 << 20)
    direct = Command("direct", ("sh", "-c", TIMED), 600)
    commands = [Command("warm-up", ("python3", "main.py"), 600)] + [run, direct] * repeat
    job = Job(commands=tuple(commands), media={"entry": EXAMPLE / "entries" / "benchmark",
                                               **submission_set_media(ch, "test")},
              install="entry", data=("test",), code=CodeDir(ch.submission.code_dir, ch.submission.data, "test"))
    conn = domain.connect(site.uri)
    try:
        with RunDir(site.layout, "bench-submission") as rd:
            make_blank_disk(rd.path / "home.qcow2", 256)
            ran = run_job(conn, site, image, job, home_disk=rd.path / "home.qcow2", workdir=rd.path,
                          console_log=rd.path / "console.log", vcpus=1, memory_mib=1024, label="bench-submission")
    finally:
        conn.close()
    done = ran.transcript.commands
    assert all(c.status == "ok" for c in done), [(c.name, c.status, bytes(c.output)[-300:]) for c in done]
    starts = [at for _seq, kind, at in ran.transcript.timeline if kind == "start"]
    ends = [at for _seq, kind, at in ran.transcript.timeline if kind == "end"]
    runs = [ends[c.index] - starts[c.index] for c in done if c.name == "run"]
    directs = []
    for c in done:
        if c.name == "direct":
            _word, s, e = bytes(c.output).decode().split()
            directs.append(float(e) - float(s))
    fmt = read_format(EXAMPLE / "test" / ch.submission.format)
    got = next(c for c in done if c.name == "run").files[ch.submission.output]
    assert check_submission(bytes(got.data), fmt).problem is None
    ratio = statistics.median(runs) / statistics.median(directs)
    return {"rows": len(fmt.ids), "run_s": [round(x, 3) for x in runs], "direct_s": [round(x, 3) for x in directs],
            "ratio": round(ratio, 3), "target": 1.2, "met": ratio <= 1.2,
            "stage_total_s": round(ran.total_seconds, 1)}


def format_check(rows: int) -> dict:
    """The host's check of a submission of `rows` rows against its format, in this example's columns."""
    header = (EXAMPLE / "test" / "submission_format.csv").read_text().splitlines()[0]
    columns = header.count(",")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "submission_format.csv"
        path.write_text(header + "\n" + "".join(f"u{i:07d}" + ",0" * columns + "\n" for i in range(rows)))
        fmt = read_format(path)
        data = (header + "\n" + "".join(f"u{i:07d}" + ",1" * columns + "\n" for i in range(rows))).encode()
        started = time.perf_counter()
        checked = check_submission(data, fmt, same_order=True)
        seconds = time.perf_counter() - started
    assert checked.problem is None and checked.rows is not None and len(checked.rows) == rows
    return {"rows": rows, "columns": columns + 1, "bytes": len(data), "seconds": round(seconds, 3),
            "rows_per_s": round(rows / seconds)}


def arguments() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--home", type=Path, default=Path(os.environ.get("VMJUDGE_TEST_HOME", "/var/tmp/vmjudge-test")))
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="one measured run each, a format check of 1000 rows")
    return ap


def main(args: argparse.Namespace) -> None:
    trial_guests()
    site = load_site(args.home)
    if args.smoke:
        args.rows, args.repeat = 1000, 1
    print(json.dumps({"benchmark": "submission", "smoke": args.smoke, "accel": site.accel, "host": platform.node(),
                      "cpus": os.cpu_count(), "whole_set": in_vm(site, args.repeat),
                      "format_check": format_check(args.rows)}, indent=2))


if __name__ == "__main__":
    run_holding_host(main, arguments())
