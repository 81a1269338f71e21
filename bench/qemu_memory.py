"""Benchmark: how much memory a judge VM's qemu holds beyond the guest's own RAM (JSON on stdout).

The margin of each domain's <memtune><hard_limit> (vm/memory.py) comes from here. For each VM
size (384 MiB, 1 GiB with 1 vCPU; 2 GiB with 2 vCPUs, as challenges ask) one cold run of a job
that fills the guest's memory as far as the entry may (its cgroup's cap) and then runs a spread
of Python code (new code for TCG to translate), and one warm run (a saved VM restored) of the
1 GiB size. While each command ends the host reads the qemu process: its peak resident size
(VmHWM), its mappings from /proc/PID/smaps split into the guest's RAM (the anonymous mapping of
exactly the guest's size), TCG's translation cache (the rwx mapping) and the rest, and its
memory cgroup's peak charge. "rest" is what the margin must hold whatever the guest touches; under
TCG the translation cache comes on top, up to its size (min(1 GiB, host RAM / 8), qemu's own).
Each run reports the limit its qemu's cgroup had: the judge's own bound (none when the margin
was first measured, before the bound existed). Exit 1 when "rest" passes the margin, or a qemu
had no limit or passed it.

--smoke: the 384 MiB size alone, restored from its warm state (the test suite's run: the same
readings and checks, of a restored qemu, whose bound is set as a cold one's is).

Usage: python bench/qemu_memory.py [--home DIR] [--sizes 384:1,1024:1,2048:2] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.host_lock import run_holding_host, trial_guests
from vmjudge.config import ImageRecipe, load_site
from vmjudge.config.layout import RunDir
from vmjudge.images.build import build_image
from vmjudge.vm import domain
from vmjudge.vm.channel import Watch
from vmjudge.vm.job import Command, Job
from vmjudge.vm.memory import MARGIN_MIB, TCG_BOOKKEEPING_MIB
from vmjudge.vm.qemu_process import qemu_pid, read_qemu, status_fields
from vmjudge.vm.reading import Limits
from vmjudge.vm.runner import make_blank_disk, run_job

MIB = 1 << 20
FILL = ("import sys\nchunks = []\nwhile True:\n    chunks.append(bytearray(b'\\x01') * (8 << 20))\n"
        "    if len(chunks) % 16 == 0:\n        print(len(chunks) * 8, 'MiB', flush=True)\n")
CODE = ("import importlib, pkgutil, json, re, decimal, fractions, statistics, difflib, textwrap, email.parser\n"
        "names = sorted(m.name for m in pkgutil.iter_modules() if not m.name.startswith(('_', 'test', 'idle', "
        "'tkinter', 'turtle', 'antigravity', 'this', 'lib2to3', 'ensurepip', 'pydoc', 'venv')))\n"
        "done = 0\nfor n in names:\n    try:\n        importlib.import_module(n); done += 1\n"
        "    except Exception:\n        pass\n"
        "s = sum(decimal.Decimal(i) / 7 for i in range(20000))\n"
        "print(done, 'modules', len(json.dumps([str(s)] * 1000)), statistics.mean(range(100000)))\n")


def smaps(pid: int, memory_mib: int) -> dict:
    """Resident MiB of the guest's RAM, TCG's translation cache and everything else."""
    ram = tb = total = 0
    size = perms = ""
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split()
        if "-" in head[0] and len(head) >= 5 and ":" not in head[0]:
            start, end = (int(x, 16) for x in head[0].split("-"))
            size, perms = str(end - start), head[1]
        elif head[0] == "Rss:":
            kib = int(head[1])
            total += kib
            if perms == "rw-p" and int(size) == memory_mib * MIB:
                ram += kib
            elif perms == "rwxp":
                tb += kib
    return {"ram_mib": round(ram / 1024, 1), "tcg_cache_mib": round(tb / 1024, 1),
            "rest_mib": round((total - ram - tb) / 1024, 1)}


def cgroup_peak(pid: int) -> int | None:
    """The memory cgroup's peak charge, MiB (v1 max_usage_in_bytes, v2 memory.peak)."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for base, name in ((Path("/sys/fs/cgroup/memory"), "memory.max_usage_in_bytes") if "memory" in
                           controllers.split(",") else (Path("/sys/fs/cgroup"), "memory.peak"),):
            f = base / path.lstrip("/") / name
            if f.is_file():
                return int(f.read_text()) // MIB
    return None


def one_run(conn, site, image, rd: Path, memory_mib: int, vcpus: int, warm: bool, n: int) -> dict:
    seen: dict = {"readings": []}

    def started(dom: domain.Domain) -> None:
        seen["pid"] = qemu_pid(dom.name)
        seen["limit"] = read_qemu(seen["pid"]).memory_limit

    def ended(result) -> bool:
        pid = seen["pid"]
        status = status_fields(Path(f"/proc/{pid}/status").read_text())
        seen["readings"].append({"after": result.name, "vmhwm_mib": int(status["VmHWM"].split()[0]) // 1024,
                                 "vmrss_mib": int(status["VmRSS"].split()[0]) // 1024, **smaps(pid, memory_mib),
                                 "cgroup_peak_mib": cgroup_peak(pid)})
        return False

    job = Job(commands=(Command("fill", ("python3", "-c", FILL), 600.0),
                        Command("code", ("python3", "-c", CODE), 600.0)))
    home = rd / f"home{n}.qcow2"
    make_blank_disk(home, 64)
    began = time.monotonic()
    run = run_job(conn, replace(site, warm_start=warm), image, job, home_disk=home, workdir=rd,
                  console_log=rd / f"console{n}.log", vcpus=vcpus, memory_mib=memory_mib, label="bench-mem",
                  limits=Limits(boot_timeout=180, deadline=1500), watch=Watch(on_end=ended), on_start=started)
    home.unlink()
    last = seen["readings"][-1]
    return {"memory_mib": memory_mib, "vcpus": vcpus, "start": run.start["mode"], "seconds": round(time.monotonic()
            - began, 1), "fill_status": run.transcript.commands[0].status if run.transcript.commands else None,
            "code_output": bytes(run.transcript.commands[1].output).decode()[-200:]
            if len(run.transcript.commands) > 1 else None, "hard_limit_mib": None if seen["limit"] is None
            else seen["limit"] // MIB, "readings": seen["readings"],
            "overhead_mib": last["vmhwm_mib"] - last["ram_mib"]}


def arguments() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--home", type=Path, default=Path(os.environ.get("VMJUDGE_TEST_HOME", "/var/tmp/vmjudge-test")))
    ap.add_argument("--sizes", default="384:1,1024:1,2048:2", help="MEMORY_MIB:VCPUS,…")
    ap.add_argument("--smoke", action="store_true", help="the 384 MiB size alone, warm (the test suite's run)")
    return ap


def main(args: argparse.Namespace) -> None:
    trial_guests()
    site = load_site(args.home)
    image = build_image(site, ImageRecipe(), progress=lambda m: print(m, file=sys.stderr))
    sizes = [(384, 1)] if args.smoke else [tuple(int(x) for x in s.split(":")) for s in args.sizes.split(",")]
    conn = domain.connect(site.uri)
    runs = []
    try:
        with RunDir(site.layout, "bench") as rd:
            for n, (memory, vcpus) in enumerate(sizes):
                runs.append(one_run(conn, site, image, rd.path, memory, vcpus, args.smoke, n))
                print(json.dumps(runs[-1]), file=sys.stderr)
            if not args.smoke:
                runs.append(one_run(conn, site, image, rd.path, 1024, 1, True, len(sizes)))
                print(json.dumps(runs[-1]), file=sys.stderr)
    finally:
        conn.close()
    rest = max(x["rest_mib"] for r in runs for x in r["readings"])
    margin = MARGIN_MIB + (TCG_BOOKKEEPING_MIB if site.accel == "tcg" else 0)  # TCG's bookkeeping is in "rest"
    bounded = all(r["hard_limit_mib"] is not None and max(x["vmhwm_mib"] for x in r["readings"]) <= r["hard_limit_mib"]
                  for r in runs)
    print(json.dumps({"accel": site.accel, "host": platform.node(), "qemu": conn_version(site),
                      "runs": runs, "max_overhead_mib": max(r["overhead_mib"] for r in runs), "max_rest_mib": rest,
                      "margin_mib": margin, "rest_within_margin": rest <= margin,
                      "every_qemu_bounded_and_within": bounded}, indent=1))
    if rest > margin or not bounded:
        raise SystemExit(f"qemu held {rest} MiB beyond guest RAM and TCG's cache (margin {margin} MiB), or a "
                         "qemu had no hard limit or passed it: see the JSON above.")


def conn_version(site) -> str:
    conn = domain.connect(site.uri)
    try:
        v = conn.getVersion()
    finally:
        conn.close()
    return f"{v // 1000000}.{v // 1000 % 1000}.{v % 1000}"


if __name__ == "__main__":
    run_holding_host(main, arguments(), "the qemu memory benchmark")
