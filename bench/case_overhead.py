"""Benchmark: what one case of a socket challenge costs the judge beyond its own command (#55).

A container challenge with Grand Challenge's sockets (one small image input, one value output) and
an image (busybox) whose command does nothing but write that value: `echo 1 > /output/x.json`. Its
root is made by stage 1 (the daemon's own run_stage, on the host), then the quiz's job is built as
the quiz builds it (stages/sockets.socket_runs: each case's files and its inputs.json on the CD, the
image's command once per case, each in a container of its own inside the VM, its output collected
by socket) and run in ONE VM, followed in the same VM by the baseline: the same command once per
case in the guest's own root, as next.sh runs (the case's files linked into the home, the file
collected from there), and a last command so that every case has a next.

Per case, host-side: the time from its command's start frame to the next command's (its place
readied, the command, the sweep, its figures, its files sent back, its place undone); the median,
min and max over the cases; the guest's own `seconds` of each command (its place readied and the
command run, up to its exit) and what the rest of the case took (`after_s`: the sweep, the figures,
the files, the layers removed). The container's median against the baseline's, as a difference and
a ratio. Target (#55): the container's median at most 0.3 s under TCG.

--smoke: 4 cases (the same job, the same checks): what the test suite runs. bench/container.py
--per-case runs the same measurement and adds it to its own JSON.

JSON on stdout; exit 1 with a sentence when a case fails or leaves no valid output (the target is
reported, not enforced: a run on a busy machine says little of speed).
Usage: python bench/case_overhead.py [--smoke] [--cases 20] [--home DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests import oci_images as oci  # noqa: E402
from tests.host_lock import in_own_home, run_holding_host, trial_guests  # noqa: E402
from vmjudge.config import Challenge, load_challenge, load_site  # noqa: E402
from vmjudge.config.layout import RunDir  # noqa: E402
from vmjudge.images.build import build_image  # noqa: E402
from vmjudge.queue.db import Queue  # noqa: E402
from vmjudge.scorers.mha import write_mha  # noqa: E402
from vmjudge.stages.container import recorded_root  # noqa: E402
from vmjudge.stages.context import StageContext  # noqa: E402
from vmjudge.stages.sockets import case_outputs, socket_runs  # noqa: E402
from vmjudge.supervisor.evaluate import run_stage  # noqa: E402
from vmjudge.supervisor.slots import Slot  # noqa: E402
from vmjudge.vm import domain  # noqa: E402
from vmjudge.vm.job import Command  # noqa: E402
from vmjudge.vm.reading import JobRun  # noqa: E402
from vmjudge.vm.runner import make_blank_disk, run_job  # noqa: E402

TARGET_S = 0.3
NAME = "bench-cases"
OUTPUT = "x.json"
PROGRAM = f"echo 1 > /output/{OUTPUT}"  # the image's command: the case's one output, nothing else
BASELINE = ("sh", "-c", f"echo 1 > {OUTPUT}")  # the same, in the guest's own root, in the home
CHALLENGE = f"""name = "{NAME}"
[entry]
kind = "container"
max_size = 67108864
max_unpacked = 67108864
[[input]]
slug = "ct-image"
kind = "image"
relative_path = "images/ct"
[[output]]
slug = "case-value"
kind = "float"
relative_path = "{OUTPUT}"
[vm]
vcpus = 1
memory = 384
home = 64
[limits]
per_record = 30
quiz_total = 3600
[score]
scorer = "tests.answered_scorer:score"
"""


def vmjudge(home: Path, *args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "vmjudge.cli", *args], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "VMJUDGE_HOME": str(home)}, timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"vmjudge {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
    return proc.stdout


def challenge(path: Path, cases: int) -> Path:
    """N training cases (and a test case, which `challenge add` asks for), each a 4x3x2 CT."""
    for subset, records in (("training", [f"c{i:02d}" for i in range(1, cases + 1)]), ("test", ["t1"])):
        (path / subset).mkdir(parents=True)
        (path / subset / "RECORDS").write_text("".join(f"{r}\n" for r in records))
        for r in records:
            (path / subset / r / "images" / "ct").mkdir(parents=True)
            (path / subset / r / "images" / "ct" / f"{r}.mha").write_bytes(
                write_mha((4, 3, 2), "MET_UCHAR", bytes(i % 3 for i in range(24)), (0.5, 0.5, 2.0)))
    (path / "reference").mkdir()
    (path / "reference" / "REFERENCE.csv").write_text("t1,1\n")
    (path / "challenge.toml").write_text(CHALLENGE)
    return path


def busybox_image(path: Path) -> Path:
    """A busybox-static root whose command writes the case's value (docker save's layout)."""
    busybox = Path(shutil.which("busybox") or "/bin/busybox")
    applets = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, check=True).stdout.split()
    members = [oci.directory("bin"), oci.file("bin/busybox", busybox.read_bytes(), mode=0o755)]
    members += [oci.symlink(f"bin/{a}", "busybox") for a in applets if a != "busybox"]
    members += [oci.directory("etc"), oci.file("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n"),
                oci.file("etc/group", b"root:x:0:\n"), oci.directory("tmp", mode=0o1777)]
    image = oci.Image([oci.Layer.of(members, compression=None)], cmd=["/bin/sh", "-c", PROGRAM], env=["PATH=/bin"])
    return oci.docker_save(path, image)


def spread(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 4), "min": round(min(values), 4),
            "max": round(max(values), 4)}


def measure(home: Path, work: Path, cases: int) -> dict:
    """The figures (see the module's docstring), in `home`, a site home whose images are the site's;
    `failures` lists what went wrong, one sentence each (empty when every case passed)."""
    started = time.monotonic()
    vmjudge(home, "challenge", "add", str(challenge(work / "cases", cases)))
    entry_id = int(vmjudge(home, "submit", NAME, str(busybox_image(work / "cases-image.tar")), "--owner", "bench"))
    site = load_site(home)
    queue = Queue(site.layout.queue_db)
    run_stage(queue, site, queue.claim_next(only=entry_id), Slot(0))
    prep = queue.stage_runs(entry_id)[-1]
    if prep.status != "passed":
        return {"cases": cases, "failures": [f"stage 1 of the image did not pass: {prep.message}"]}
    ch = load_challenge(queue.challenge_dir(NAME))
    image = build_image(site, ch.image, progress=lambda m: print(m, file=sys.stderr))
    ctx = StageContext(site, ch, image, queue.entry(entry_id), attempt=1)
    runs = socket_runs(ctx, "training", ch.training, recorded_root(ctx))
    baseline = tuple(Command(f"baseline {r}", BASELINE, ch.limits.per_record, collect=(OUTPUT,),
                             links=tuple(p for p in runs.job.media if p.startswith(f"training/{r}/")))
                     for r in ch.training)
    job = replace(runs.job, commands=(*runs.job.commands, *baseline, Command("the last", ("true",), 30)),
                  stop_on_failure=True)
    conn = domain.connect(site.uri)
    try:
        with RunDir(site.layout, "bench-cases") as rd:
            make_blank_disk(rd.path / "home.qcow2", ch.vm.home_mib)
            ran = run_job(conn, site, image, job, home_disk=rd.path / "home.qcow2", workdir=rd.path,
                          console_log=rd.path / "console.log", vcpus=ch.vm.vcpus, memory_mib=ch.vm.memory_mib,
                          label="bench-cases")
    finally:
        conn.close()
    return figures(ch, ran, cases) | {"start": (ran.start or {}).get("mode"), "boot_s": round(ran.boot_seconds, 2),
                                      "total_s": round(time.monotonic() - started, 1)}


def figures(ch: Challenge, ran: JobRun, cases: int) -> dict:
    t = ran.transcript
    failures = [f"the agent said: {t.agent_error}"] if t.agent_error else []
    records = ch.training
    for i, cmd in enumerate(t.commands[:2 * cases]):
        record = records[i % cases]
        if cmd.status != "ok":
            failures.append(f"{cmd.name}: {cmd.status} (exit {cmd.exit_code}) {cmd.message} "
                            f"{bytes(cmd.output[:200])!r} {bytes(cmd.errors[:200])!r}")
        elif i < cases and case_outputs(ch, "training", record, cmd).problems:
            failures.append("; ".join(case_outputs(ch, "training", record, cmd).problems))
        elif i >= cases and (cmd.files.get(OUTPUT) is None or cmd.files[OUTPUT].data != b"1\n"):
            failures.append(f"{cmd.name}: no {OUTPUT} holding 1 came back")
    if len(t.commands) != 2 * cases + 1 or t.commands[-1].status != "ok":
        failures.append(f"{len(t.commands)} of the job's {2 * cases + 1} commands ran, the last {t.commands[-1].status}"
                        if t.commands else "no command ran")
    if failures:
        return {"cases": cases, "failures": failures}
    starts = [at for _seq, kind, at in t.timeline if kind == "start"]
    ends = [at for _seq, kind, at in t.timeline if kind == "end"]
    side: dict[str, dict] = {}
    for name, first in (("container", 0), ("baseline", cases)):
        span = range(first, first + cases)
        case = [starts[i + 1] - starts[i] for i in span]
        seconds = [t.commands[i].seconds for i in span]
        side[name] = {"per_case_s": spread(case), "guest_seconds": spread(seconds),
                      "start_to_end_s": spread([ends[i] - starts[i] for i in span]),
                      "after_s": spread([c - s for c, s in zip(case, seconds, strict=True)]),
                      "each_case_s": [round(c, 4) for c in case], "each_seconds": [round(s, 3) for s in seconds],
                      "cpu_seconds": spread([(t.commands[i].usage or {}).get("cpu_seconds") or 0.0 for i in span])}
    container, base = side["container"]["per_case_s"]["median"], side["baseline"]["per_case_s"]["median"]
    return {"cases": cases, "failures": [], **side, "container_minus_baseline_s": round(container - base, 4),
            "container_over_baseline": round(container / base, 3), "target_s": TARGET_S,
            "met": container <= TARGET_S}


def arguments() -> argparse.ArgumentParser:
    """Its options, parsed before the host is taken (run_holding_host)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--home", type=Path, default=Path(os.environ.get("VMJUDGE_TEST_HOME", "/var/tmp/vmjudge-test")),
                    help="the site home whose images are used; the benchmark's own home is made in it and removed")
    ap.add_argument("--cases", type=int, default=20, help="cases in the job (default 20), each run twice")
    ap.add_argument("--smoke", action="store_true", help="4 cases: the same job and checks")
    return ap


def main(args: argparse.Namespace) -> None:
    trial_guests()
    cases = 4 if args.smoke else args.cases
    result = {"benchmark": "case_overhead", "smoke": args.smoke, "host": platform.node(),
              "accel": load_site(args.home).accel, "cores": os.cpu_count(), "date": time.strftime("%Y-%m-%d"),
              **in_own_home(args.home, lambda home, work: measure(home, work, cases), "bench-cases-")}
    print(json.dumps(result, indent=1))
    if result["failures"]:
        sys.exit(f"bench/case_overhead.py: a case failed: {result['failures'][0]}")


if __name__ == "__main__":
    run_holding_host(main, arguments())
