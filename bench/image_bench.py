"""What the image benchmarks (octave.py, gpu_image.py) share: their command line, building an
image and reporting its figures, the vmjudge command line run in the benchmark's home, and
waiting for the host's one VM session. Imported by plain name: each benchmark runs as a script
from bench/."""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.host_lock import HostBusy, exclusive_host, trial_guests  # noqa: E402
from vmjudge.config import ImageRecipe, load_site  # noqa: E402
from vmjudge.config.site import Site  # noqa: E402
from vmjudge.images.build import build_image, image_key  # noqa: E402
from vmjudge.images.image import FILES, GuestImage  # noqa: E402

T = TypeVar("T")


def parse_args(doc: str, default_home: Path) -> tuple[argparse.Namespace, Site]:
    """The benchmarks' options, and their site (TCG unless told otherwise), its layout made."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--home", type=Path, default=default_home,
                    help="the benchmark's site home; its images/ is kept between runs")
    ap.add_argument("--rebuild", action="store_true", help="build both images again (both times of this run)")
    ap.add_argument("--keep", action="store_true", help="keep the judge's home (HOME/run-*) afterwards")
    ap.add_argument("--wait-for-host", type=float, default=0, metavar="SECONDS",
                    help="how long to wait for another VM session to end (default: not at all)")
    ap.add_argument("--smoke", action="store_true",
                    help="the base image only (not the benchmark's own, a build and a download) and the fewest VMs "
                         "that still run its code: what the test suite runs")
    args = ap.parse_args()
    trial_guests()
    site = load_site(args.home)
    site.layout.ensure()
    return args, site


def image_figures(site: Site, recipe: ImageRecipe, rebuild: bool) -> tuple[GuestImage, dict]:
    """The recipe's image, built unless it is (or --rebuild), and its figures; an image built
    earlier reports the build time its manifest stored."""
    built_now = rebuild or not (site.layout.images / image_key(site, recipe) / "manifest.json").exists()
    image = build_image(site, recipe, progress=lambda m: print(m, file=sys.stderr), force=rebuild)
    m = image.manifest
    return image, {"key": image.key, "built_in_this_run": built_now, "build_seconds": m["build_seconds"],
                   "root_sqfs_bytes": image.root.stat().st_size,
                   "image_bytes": sum((image.directory / n).stat().st_size for n in FILES),
                   "debian_packages": len(m["packages"]), "kernel_version": m["kernel_version"],
                   "initramfs_modules": len(m["initramfs_modules"])}


def vmjudge(home: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """The command line as an organiser runs it, in the benchmark's home; exits saying why if it fails."""
    proc = subprocess.run([sys.executable, "-m", "vmjudge.cli", *args], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "VMJUDGE_HOME": str(home)}, timeout=timeout)
    if proc.returncode != 0:
        raise SystemExit(f"vmjudge {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def with_host(what: str, wait: float, body: Callable[[], T]) -> T:
    """`body` while holding the host's one VM session, polling every 60 s for up to `wait` seconds."""
    deadline = time.monotonic() + wait
    while True:
        try:
            with exclusive_host(what):
                return body()
        except HostBusy as exc:
            if time.monotonic() >= deadline:
                raise SystemExit(str(exc)) from None
            print("another session holds the host; trying again in 60 s", file=sys.stderr)
            time.sleep(60)


def write_entry(out: Path, setup: str, next_sh: str, answers: str) -> Path:
    """An answer-lines entry archive: setup.sh, next.sh (both executable) and its answers.txt."""
    with tarfile.open(out, "w:gz") as tar:
        for name, data, mode in (("setup.sh", setup.encode(), 0o755), ("next.sh", next_sh.encode(), 0o755),
                                 ("answers.txt", answers.encode(), 0o644)):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return out
