"""Benchmark: what a container entry costs the judge before its first command runs (#39).

An image of about 1 GiB, as `docker save` writes it (uncompressed layers): a busybox-static root,
the entry's program (a line of sh: each record's word in capitals) with its submitted results, and
`--size-mib` of the things images carry, 3/4 of it "model weights" (random bytes, in 8 files) and
1/4 a library tree (text, in files of 12 KiB). Measured, in a home of its own:
- admission: `vmjudge submit` of the image (the archive copied to the spool and read through),
  and admission's check alone (check_container);
- the root: skopeo, umoci, the walk that neutralises the tree and mksquashfs, each timed by the
  root's making (its record), and the squashfs's size;
- stage 1 of that entry (on the host: the image checked again, its root made, its submitted
  results read) against stage 1 of an archive entry holding the same program on a challenge of
  the same shape (a VM: the entry copied in, setup.sh run), run twice (the first may make the saved
  VM warm starts restore), each through the daemon's own run_stage;
- the same image submitted twice: the second entry's stage 1 finds the root the first made (one
  squashfs in the home), and what that costs.

--smoke: a payload of 2 MiB (the same steps; one archive stage 1, one VM), what the test suite runs.
--per-case [N]: also what one case of a socket challenge costs beyond its command, over N cases (20;
with --smoke 4) in one VM, against the same commands in the guest's own root (bench/case_overhead.py).

JSON on stdout; exit 1 with a sentence when an entry's stage 1 does not pass, the image is
unpacked twice or a case fails. Usage: python bench/container.py [--smoke] [--size-mib 1024] [--home DIR]
[--per-case [N]]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from case_overhead import measure as measure_cases  # noqa: E402

from tests import oci_images as oci  # noqa: E402
from tests.host_lock import run_holding_host, trial_guests  # noqa: E402
from vmjudge.archive.checks import check_container  # noqa: E402
from vmjudge.config import load_challenge, load_site  # noqa: E402
from vmjudge.config.layout import Layout  # noqa: E402
from vmjudge.queue.db import Queue  # noqa: E402
from vmjudge.supervisor.evaluate import run_stage  # noqa: E402
from vmjudge.supervisor.slots import Slot  # noqa: E402

WORD = {"r1": "apple"}  # the training set, whose answers the entry submits
TEST_WORD = {"t1": "pear"}  # the test set: records of its own (challenge add refuses a record in both)
PROGRAM = 'tr a-z A-Z < "/input/$VMJUDGE_RECORD.txt" > "/output/$VMJUDGE_RECORD.out"'
NEXT_SH = 'tr a-z A-Z < "$1.txt" > "$1.out"\n'  # the same program, as an archive entry's next.sh
SHAPE = """[vm]
vcpus = 1
memory = 384
home = 64
[limits]
per_record = 30
[results]
style = "files"
pattern = "{{record}}.out"
submitted = "{submitted}"
[score]
scorer = "tests.answered_scorer:score"
"""
CONTAINER = 'name = "bench-container"\n[entry]\nkind = "container"\nmax_size = SIZE\nmax_unpacked = SIZE\n' \
            '[container]\n' + SHAPE.format(submitted="/submitted/{record}.out")
ARCHIVE = 'name = "bench-archive"\n[entry]\nrequired = ["setup.sh", "next.sh"]\n' + \
          SHAPE.format(submitted="outputs/{record}.out")
WEIGHT_FILES = 8
TEXT_FILE = 12 << 10


def vmjudge(home: Path, *args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "vmjudge.cli", *args], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "VMJUDGE_HOME": str(home)}, timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"vmjudge {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
    return proc


def challenge(path: Path, toml: str) -> Path:
    for subset, words in (("training", WORD), ("test", TEST_WORD)):
        (path / subset).mkdir(parents=True)
        (path / subset / "RECORDS").write_text("".join(f"{r}\n" for r in words))
        for record, word in words.items():
            (path / subset / f"{record}.txt").write_text(word + "\n")
    (path / "reference").mkdir()
    (path / "reference" / "REFERENCE.csv").write_text("".join(f"{r},{w.upper()}\n" for r, w in TEST_WORD.items()))
    (path / "challenge.toml").write_text(toml)
    return path


class Random:
    """A file-like source of `size` random bytes (model weights do not compress)."""

    def __init__(self, size: int):
        self.left = size

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        self.left -= n
        return os.urandom(n)


def _add(tf: tarfile.TarFile, name: str, size: int, source: object, mode: int = 0o644) -> None:
    """A regular file of `size` bytes read from `source`."""
    ti = tarfile.TarInfo(name)
    ti.size, ti.mode, ti.mtime = size, mode, 1700000000
    tf.addfile(ti, source)  # type: ignore[arg-type]


def _dir(tf: tarfile.TarFile, name: str, mode: int = 0o755) -> None:
    ti = tarfile.TarInfo(name)
    ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, mode, 1700000000
    tf.addfile(ti)


def payload(tf: tarfile.TarFile, size: int) -> int:
    """`size` bytes of weights and library files; the number of files."""
    weights, text = size * 3 // 4, size - size * 3 // 4
    vocabulary = ["def", "return", "self", "import", "tensor", "layer", "weight", "(", ")", ":", "\n    ", "=",
                  "numpy", "float32", "shape", "for", "in", "range"]
    words = random.Random(39).choices(vocabulary, k=1 << 18)
    corpus = " ".join(words).encode()
    for d in ("models", "lib", "lib/site"):
        _dir(tf, d)
    per = weights // WEIGHT_FILES
    for i in range(WEIGHT_FILES):
        _add(tf, f"models/weights-{i}.bin", per, Random(per))
    count = max(1, text // TEXT_FILE)
    for i in range(count):
        if i % 500 == 0:
            _dir(tf, f"lib/site/p{i // 500}")
        start = (i * 7919) % (len(corpus) - TEXT_FILE)
        _add(tf, f"lib/site/p{i // 500}/m{i}.py", TEXT_FILE, io.BytesIO(corpus[start:start + TEXT_FILE]))
    return WEIGHT_FILES + count


def write_image(work: Path, size: int) -> tuple[Path, dict]:
    """The image archive and what it holds."""
    started = time.monotonic()
    busybox = Path(shutil.which("busybox") or "/bin/busybox")
    applets = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, check=True).stdout.split()

    def base(tf: tarfile.TarFile) -> None:
        _dir(tf, "bin")
        data = busybox.read_bytes()
        _add(tf, "bin/busybox", len(data), io.BytesIO(data), 0o755)
        for a in applets:
            if a != "busybox":
                ti = tarfile.TarInfo(f"bin/{a}")
                ti.type, ti.linkname, ti.mtime = tarfile.SYMTYPE, "busybox", 1700000000
                tf.addfile(ti)
        for d, mode in (("etc", 0o755), ("tmp", 0o1777), ("submitted", 0o755)):
            _dir(tf, d, mode)
        _add(tf, "etc/passwd", 30, io.BytesIO(b"root:x:0:0:root:/root:/bin/sh\n"))
        for record, word in WORD.items():
            out = word.upper().encode() + b"\n"
            _add(tf, f"submitted/{record}.out", len(out), io.BytesIO(out))
    counted = {}
    layers = [oci.LayerFile.write(work / "base.tar", base),
              oci.LayerFile.write(work / "payload.tar", lambda tf: counted.update(files=payload(tf, size)))]
    archive = oci.docker_save_files(work / "bench-image.tar", layers, cmd=["/bin/sh", "-c", PROGRAM],
                                    env=["PATH=/bin"])
    for layer in layers:
        layer.path.unlink()
    return archive, {"archive_bytes": archive.stat().st_size, "payload_bytes": size,
                     "payload_files": counted["files"], "layers": len(layers),
                     "write_seconds": round(time.monotonic() - started, 1)}


def write_archive_entry(path: Path) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data, mode in (("setup.sh", b"true\n", 0o755), ("next.sh", NEXT_SH.encode(), 0o755)) + tuple(
                (f"outputs/{r}.out", w.upper().encode() + b"\n", 0o644) for r, w in WORD.items()):
            _add(tar, name, len(data), io.BytesIO(data), mode)
    return path


def stage_1(home: Path, entry_id: int) -> dict:
    """Entry `entry_id`'s stage 1, as the daemon runs it, timed; with what its manifest says of the root."""
    site = load_site(home)
    queue = Queue(site.layout.queue_db)
    started = time.monotonic()
    run_stage(queue, site, queue.claim_next(only=entry_id), Slot(0))
    seconds = time.monotonic() - started
    run = queue.stage_runs(entry_id)[-1]
    return {"seconds": round(seconds, 2), "status": run.status, "message": run.message,
            "entry_root": (run.manifest or {}).get("entry_root")}


def measure(home: Path, work: Path, size: int, smoke: bool) -> dict:
    archive, held = write_image(work, size)
    limit = str(max(size * 2, 1 << 30))
    vmjudge(home, "challenge", "add", str(challenge(work / "container", CONTAINER.replace("SIZE", limit))))
    vmjudge(home, "challenge", "add", str(challenge(work / "archive", ARCHIVE)))
    ch = load_challenge(work / "container")
    started = time.monotonic()
    check_container(ch, "bench-container", archive)
    check_seconds = time.monotonic() - started
    started = time.monotonic()
    first = int(vmjudge(home, "submit", "bench-container", str(archive), "--owner", "first").stdout)
    submit_seconds = time.monotonic() - started
    second = int(vmjudge(home, "submit", "bench-container", str(archive), "--owner", "second").stdout)
    entry = write_archive_entry(work / "same-entry.tar.gz")
    archives = [int(vmjudge(home, "submit", "bench-archive", str(entry), "--owner", f"a{i}").stdout)
                for i in range(1 if smoke else 2)]
    runs = {"archive": [stage_1(home, i) for i in archives]}
    runs["container_first"] = [stage_1(home, first)]
    runs["container_again"] = [stage_1(home, second)]
    made = runs["container_first"][0]["entry_root"] or {}
    again = runs["container_again"][0]["entry_root"] or {}
    squashfs = sorted(p.name for p in Layout(home).entry_roots.rglob("*.squashfs"))
    archive_s = runs["archive"][-1]["seconds"]  # the last: a saved VM to restore was there by then
    first_s, again_s = runs["container_first"][0]["seconds"], runs["container_again"][0]["seconds"]
    return {
        "image": held,
        "admission": {"check_seconds": round(check_seconds, 2), "submit_seconds": round(submit_seconds, 2)},
        "root": {"seconds": made.get("made_seconds"), "squashfs_bytes": made.get("squashfs_bytes"),
                 "unpacked_bytes": made.get("unpacked_bytes"), "files": made.get("files")},
        "stage1": {"archive_seconds": [r["seconds"] for r in runs["archive"]], "container_first_seconds": first_s,
                   "container_again_seconds": again_s, "overhead_first_seconds": round(first_s - archive_s, 2),
                   "overhead_again_seconds": round(again_s - archive_s, 2),
                   "all_passed": all(r["status"] == "passed" for rs in runs.values() for r in rs),
                   "messages": {k: [r["message"] for r in rs] for k, rs in runs.items()}},
        "same_image_twice": {"entries": 2, "first_reused": made.get("reused"), "second_reused": again.get("reused"),
                             "same_root": made.get("digest") == again.get("digest"),
                             "squashfs_files": len(squashfs), "roots_made": len(squashfs)},
    }


def arguments() -> argparse.ArgumentParser:
    """Its options, parsed before the host is taken (run_holding_host)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--home", type=Path, default=Path(os.environ.get("VMJUDGE_TEST_HOME", "/var/tmp/vmjudge-test")),
                    help="the site home whose images are used; the benchmark's own home is made in it and removed")
    ap.add_argument("--size-mib", type=int, default=1024, help="the image's payload (default 1024: about 1 GiB)")
    ap.add_argument("--smoke", action="store_true", help="a 2 MiB payload, one archive stage 1: the same checks")
    ap.add_argument("--per-case", type=int, nargs="?", const=20, metavar="N",
                    help="also the per-case overhead of a socket challenge over N cases (20; --smoke: 4)")
    return ap


def main(args: argparse.Namespace) -> None:
    trial_guests()
    size = (2 if args.smoke else args.size_mib) << 20
    site = load_site(args.home)
    site.layout.ensure()
    home = Path(tempfile.mkdtemp(prefix="bench-container-", dir=args.home))
    os.chmod(home, 0o711)
    try:
        Layout(home).images.symlink_to(site.layout.images)
        work = home / "work"
        work.mkdir()
        result = {"benchmark": "container", "smoke": args.smoke, "host": platform.node(), "accel": site.accel,
                  "cores": os.cpu_count(), "date": time.strftime("%Y-%m-%d"), **measure(home, work, size, args.smoke)}
        if args.per_case is not None:
            result["per_case"] = measure_cases(home, work, 4 if args.smoke else args.per_case)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    print(json.dumps(result, indent=1))
    twice = result["same_image_twice"]
    problems = {"a stage 1 did not pass": not result["stage1"]["all_passed"],
                "the same image was unpacked twice": twice["roots_made"] != 1 or twice["second_reused"] is not True
                or twice["first_reused"] is not False or not twice["same_root"],
                "a case of the per-case job failed": bool(result.get("per_case", {}).get("failures"))}
    failed = [what for what, bad in problems.items() if bad]
    if failed:
        sys.exit(f"bench/container.py: {'; '.join(failed)} (see the JSON above).")


if __name__ == "__main__":
    run_holding_host(main, arguments())
