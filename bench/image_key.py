"""Benchmark: what finding a challenge's image costs a VM stage when its image/ directory is large (JSON on stdout).

Every VM stage finds its guest image by key (images/build.py image_key), and the key covers
the challenge's image/ directory by content (build_step.tree_hash). A challenge that ships
model weights or a toolchain there made every stage read all of it (#36). Now the last pass's
stat signatures and sha256s are kept (Layout.tree_hashes), and a file that did not change is
not read again.

Makes an image/ directory of --mib MiB (files of 8 MiB of random bytes, a build.sh) and times,
best of --rounds each, interleaved:
- read_whole: the key as every stage took it before (tree_hash reading every file);
- known: image_key(site, recipe) as a stage takes it now, after one pass has recorded the hashes.
ratio = read_whole / known. Checked: both give the same key, the key changes when one file
is rewritten to the same size with its mtime put back, and a pass with known hashes reads no
file (exit 1 otherwise).

--smoke: 4 MiB, one round, the same checks.

Usage: python bench/image_key.py [--smoke] [--mib 512] [--rounds 3] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from vmjudge.config import ImageRecipe, load_site  # noqa: E402
from vmjudge.images import build_step  # noqa: E402
from vmjudge.images.build import image_key  # noqa: E402

FILE_MIB = 8


def make_tree(tree: Path, mib: int) -> int:
    (tree / "weights").mkdir(parents=True)
    (tree / "build.sh").write_text("#!/bin/sh\ncp -r weights /opt/\n")
    files = max(1, mib // FILE_MIB)
    for i in range(files):
        (tree / "weights" / f"part{i:04d}.bin").write_bytes(os.urandom(min(mib, FILE_MIB) << 20))
    return files


def timed(call) -> tuple[float, str]:
    started = time.perf_counter()
    got = call()
    return time.perf_counter() - started, got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=512, help="the image/ directory's size")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="where to make it (default: a temp dir)")
    parser.add_argument("--smoke", action="store_true", help="4 MiB, one round: seconds, the same checks")
    args = parser.parse_args()
    if args.smoke:
        args.mib, args.rounds = 4, 1
    base = Path(tempfile.mkdtemp(prefix="bench-image-key-", dir=args.dir))
    try:
        challenge = base / "challenge"
        tree = challenge / "image"
        files = make_tree(tree, args.mib)
        site = load_site(base / "home")
        recipe = ImageRecipe(build="image/build.sh", build_dir=tree)
        first_seconds, key = timed(lambda: image_key(site, recipe))  # reads every file, records their hashes
        whole, known = [], []
        read: list[str] = []
        real = build_step.sha256_file

        def counting(path):
            read.append(str(path))
            return real(path)

        for _ in range(args.rounds):  # interleaved, best of each: a busy host slows both alike
            whole.append(timed(lambda: build_step.tree_hash(tree))[0])
            build_step.sha256_file = counting  # type: ignore[assignment]
            try:
                seconds, again = timed(lambda: image_key(site, recipe))
            finally:
                build_step.sha256_file = real  # type: ignore[assignment]
            assert again == key, "the key with known hashes differs from the one read whole"
            known.append(seconds)
        reads_with_known = len(read)
        victim = tree / "weights" / "part0000.bin"
        st = victim.stat()
        victim.write_bytes(b"\0" * st.st_size)  # same size, mtime put back: only ctime tells
        os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))
        rewritten_noticed = image_key(site, recipe) != key
        ok = reads_with_known == 0 and rewritten_noticed
        print(json.dumps({
            "benchmark": "image_key", "smoke": args.smoke, "mib": args.mib, "files": files + 1, "rounds": args.rounds,
            "first_pass_seconds": round(first_seconds, 3),
            "read_whole": {"what": "tree_hash reading every file, as every stage did (best round)",
                           "seconds": round(min(whole), 4), "all_seconds": [round(t, 4) for t in whole]},
            "known": {"what": "image_key with the last pass's hashes, as a stage does now (best round)",
                      "seconds": round(min(known), 4), "all_seconds": [round(t, 4) for t in known]},
            "ratio": round(min(whole) / min(known), 1),
            "files_read_with_known_hashes": reads_with_known,
            "same_key": True, "rewrite_noticed": rewritten_noticed,
            "host": {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version()},
        }, indent=2))
        sys.exit(0 if ok else 1)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
