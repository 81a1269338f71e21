"""Benchmark: what a stage costs as the data set grows, with data disks and with the CD (#57).

The challenge of `vmjudge challenge new --style answer-lines` cut to two training and two test
records, each given a file RECORD.pad of random bytes beside its RECORD.txt: SMALL bytes each, then
LARGE (1 MiB and 1 GiB; --smoke: 64 KiB and 8 MiB). Its sample entry reads a few bytes of each record
(its RECORD.txt) and never the pad. The quiz's and the exam's jobs are built by the stages' own code
(stages/records.py record_job: next.sh once per record, the record's files linked beside it), the
entry installed in the home as stage 1 leaves it, and each is run in a real VM (vm/runner.py), N
entries in turn (N = 4; --smoke: 2, and the test set's stage alone):

- disk: as the judge runs them now, each record set a data disk (made once, by the first run that
  needs it; its making timed apart);
- cd: as before #57, every record file on the stage's CD (the same job with no data sets).

Measured: each run's seconds (host side, the domain's start to its end: what a stage waits for), the
host's scratch bytes while it runs (the run directory, read when its VM has started: its CD and /tmp
disk), and the data disks made. The ratios of LARGE to SMALL per stage are the figure of merit (target
<= 1.2 with disks). A second measure: in one VM, the guest reads one LARGE file (page cache dropped
first) from its data disk and from a plain virtio disk (ext4, the home disk) holding the same bytes,
and from the CD, as dd reports it (three reads each, the median).

JSON on stdout; exit 1 with a sentence when a run fails, an answer is wrong, or a disk is made twice.
Usage: python bench/data_scale.py [--smoke] [--home DIR] [--entries N]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.host_lock import in_own_home, run_holding_host, trial_guests  # noqa: E402
from vmjudge.config import load_challenge, load_site  # noqa: E402
from vmjudge.config.layout import RunDir  # noqa: E402
from vmjudge.images.build import build_image  # noqa: E402
from vmjudge.images.data_disk import SUFFIX  # noqa: E402
from vmjudge.stages.records import record_job  # noqa: E402
from vmjudge.vm import domain  # noqa: E402
from vmjudge.vm.job import Command, Job  # noqa: E402
from vmjudge.vm.runner import make_blank_disk, run_job  # noqa: E402

MIB = 1 << 20
READS = 3  # of the file from each medium, in one VM, the page cache dropped before each: the median is given


def challenge(home: Path, work: Path, name: str, pad: int) -> Path:
    """The scaffold challenge with two records a set, each with `pad` random bytes beside it."""
    path = work / name
    subprocess.run([sys.executable, "-m", "vmjudge.cli", "challenge", "new", str(path), "--style", "answer-lines"],
                   check=True, capture_output=True, env={**os.environ, "VMJUDGE_HOME": str(home)}, cwd=REPO)
    for subset in ("training", "test"):
        records = (path / subset / "RECORDS").read_text().split()
        (path / subset / "RECORDS").write_text("".join(f"{r}\n" for r in records[:2]))
        for r in records[:2]:
            with open(path / subset / f"{r}.pad", "wb") as f:
                left = pad
                while left:
                    f.write(os.urandom(min(left, 16 * MIB)))
                    left -= min(left, 16 * MIB)
    (path / "entries" / "sample" / "answers.txt").unlink()  # what the runs append to, from empty
    return path


def run_dir_bytes(path: Path) -> int:
    """Bytes the run directory takes on the host's disk (blocks, not apparent sizes: a sparse disk counts
    what is written)."""
    return sum(p.stat().st_blocks * 512 for p in path.rglob("*") if p.is_file())


def stage_runs(site, image, ch, subset: str, with_disks: bool, entries: int) -> list[dict]:
    """The stage's job over `subset`, run `entries` times, each on a fresh home with the entry installed."""
    ctx = type("Ctx", (), {"challenge": ch})()
    records = ch.training if subset == "training" else ch.test
    job = record_job(ctx, subset, records, collect_each=False)
    job = replace(job, media={**job.media, "entry": ch.directory / "entries" / "sample"}, install="entry",
                  data=job.data if with_disks else ())
    conn = domain.connect(site.uri)
    runs = []
    try:
        for n in range(entries):
            with RunDir(site.layout, f"bench-{subset}") as rd:
                home = rd.path / "home.qcow2"
                make_blank_disk(home, 64)
                scratch: list[int] = []
                started = time.monotonic()
                run = run_job(conn, site, image, job, home_disk=home, workdir=rd.path,
                              console_log=rd.path / "console.log", vcpus=1, memory_mib=512, label="bench",
                              on_start=lambda _d, seen=scratch, where=rd.path: seen.append(run_dir_bytes(where)))
                seconds = time.monotonic() - started
            statuses = [c.status for c in run.transcript.commands]
            answers = run.transcript.commands[-1].files.get("answers.txt") if run.transcript.commands else None
            runs.append({"entry": n, "seconds": round(seconds, 2), "scratch_bytes": scratch[0] if scratch else None,
                         "statuses_ok": statuses == ["ok"] * len(records),
                         "answers": len((answers.data if answers else b"").splitlines()),
                         "start": run.start["mode"] if run.start else None})
    finally:
        conn.close()
    return runs


def throughput(site, image, ch, big: Path) -> dict:
    """MB/s the guest reads `big` at from its data disk, a plain virtio disk (ext4) and the CD."""
    conn = domain.connect(site.uri)
    try:
        with RunDir(site.layout, "bench-read") as rd:
            tree = rd.path / "tree"
            tree.mkdir()
            os.link(big, tree / "big")
            raw = rd.path / "plain.raw"
            subprocess.run(["mkfs.ext4", "-q", "-F", "-d", str(tree), str(raw),
                            f"{(big.stat().st_size * 11 // 10 + 64 * MIB) // 1024}k"], check=True, capture_output=True)
            home = rd.path / "plain.qcow2"
            subprocess.run(["qemu-img", "convert", "-q", "-O", "qcow2", str(raw), str(home)], check=True)
            raw.unlink()
            drop = Command("drop caches", ("sh", "-c", "sync; echo 3 > /proc/sys/vm/drop_caches"), 60, user="root")

            def read(path: str) -> Command:
                return Command(f"read {path}", ("sh", "-c", f"dd if={path} of=/dev/null bs=1M 2>&1 | tail -n 1"),
                               900, user="root")

            figures = {}
            for name, media, data, path in (("data_disk", {"d/big": big}, ("d",), "/media/cdrom/d/big"),
                                            ("cd", {"d/big": big}, (), "/media/cdrom/d/big"),
                                            ("plain_virtio", {}, (), "/home/entry/big")):
                job = Job(commands=(drop, read(path)) * READS, media=media, data=data)
                run = run_job(conn, site, image, job, home_disk=home, workdir=rd.path,
                              console_log=rd.path / f"console-{name}.log", vcpus=1, memory_mib=512, label="bench")
                said = [bytes(c.output).decode(errors="replace").strip() for c in run.transcript.commands[1::2]]
                rates = [dd_rate(one, big.stat().st_size) for one in said]
                known = sorted(r for r in rates if r is not None)
                figures[name] = {"said": said, "mb_s_each": rates,
                                 "mb_s": known[len(known) // 2] if len(known) == len(rates) else None}
    finally:
        conn.close()
    plain = figures["plain_virtio"]["mb_s"]

    def over_plain(name: str) -> float | None:
        return round(figures[name]["mb_s"] / plain, 3) if plain and figures[name]["mb_s"] else None

    return {"bytes": big.stat().st_size, "reads_each": READS, **figures,
            "data_disk_over_plain": over_plain("data_disk"), "cd_over_plain": over_plain("cd")}


def dd_rate(said: str, size: int) -> float | None:
    """MB/s from dd's last line ("N bytes (...) copied, S s, R MB/s"): N / S, so its unit does not matter."""
    try:
        fields = said.strip().split(",")
        copied, seconds = int(fields[0].split()[0]), float(fields[-2].split()[0])
    except (ValueError, IndexError):
        return None
    return round(copied / seconds / 1e6, 1) if copied == size and seconds > 0 else None


def measure(home: Path, work: Path, smoke: bool, entries: int) -> dict:
    site = load_site(home)
    sizes = {"small": 64 << 10, "large": 8 * MIB} if smoke else {"small": MIB, "large": 1 << 30}
    out: dict = {"pad_bytes": sizes, "entries": entries, "stages": {}}
    challenges = {k: load_challenge(challenge(home, work, f"data-{k}", v)) for k, v in sizes.items()}
    image = build_image(site, challenges["small"].image, progress=lambda m: print(m, file=sys.stderr))
    store = site.layout.data_disks
    subsets = ("test",) if smoke else ("training", "test")  # the smoke run: what the suite needs, at half the VMs
    for mode in ("disk", "cd"):
        for subset in subsets:
            for size, ch in challenges.items():
                before = set(store.glob("*" + SUFFIX)) if store.is_dir() else set()
                runs = stage_runs(site, image, ch, subset, mode == "disk", entries)
                made = len(set(store.glob("*" + SUFFIX)) - before) if store.is_dir() else 0
                out["stages"][f"{mode}/{subset}/{size}"] = {"runs": runs, "disks_made": made}
    for mode in ("disk", "cd"):
        for subset in subsets:
            ratio = steady(out, f"{mode}/{subset}/large") / steady(out, f"{mode}/{subset}/small")
            out[f"{mode}_{subset}_large_over_small"] = round(ratio, 3)
    big = challenges["large"].directory / "test" / f"{challenges['large'].test[0]}.pad"
    out["read"] = throughput(site, image, challenges["large"], big)
    return out


def steady(out: dict, name: str) -> float:
    """The median seconds of a stage's runs after its first (which made its data disk)."""
    runs = out["stages"][name]["runs"]
    later = [r["seconds"] for r in runs[1:]] or [runs[0]["seconds"]]
    return sorted(later)[len(later) // 2]


def failures(out: dict) -> list[str]:
    said = [f"{name} entry {run['entry']}: a command failed or its answers are not 2 lines"
            for name, stage in out["stages"].items() for run in stage["runs"]
            if not run["statuses_ok"] or run["answers"] != 2]
    for name, stage in out["stages"].items():
        if name.startswith("disk/") and stage["disks_made"] != 1:
            said.append(f"{name}: {stage['disks_made']} data disks made for {len(stage['runs'])} runs, not 1")
    for name, figures in out["read"].items():
        if isinstance(figures, dict) and figures.get("mb_s") is None:
            said.append(f"the read from {name} gave no rate: {figures.get('said')!r}")
    return said


def arguments() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="64 KiB and 8 MiB, 2 entries, the test set's stage alone: "
                    "what the test suite runs")
    ap.add_argument("--entries", type=int, default=None, help="runs of each stage (default 4; --smoke 2)")
    ap.add_argument("--home", type=Path, default=Path(os.environ.get("VMJUDGE_TEST_HOME", "/var/tmp/vmjudge-test")),
                    help="the site home whose images are used; the benchmark's own home is made in it and removed")
    return ap


def main(args: argparse.Namespace) -> None:
    trial_guests()
    entries = args.entries or (2 if args.smoke else 4)
    out = {"benchmark": "data_scale", "smoke": args.smoke, "date": time.strftime("%Y-%m-%d"),
           **in_own_home(args.home, lambda home, work: measure(home, work, args.smoke, entries), "bench-data-")}
    print(json.dumps(out, indent=1))
    if said := failures(out):
        sys.exit("bench/data_scale.py: " + "; ".join(said))


if __name__ == "__main__":
    run_holding_host(main, arguments())
