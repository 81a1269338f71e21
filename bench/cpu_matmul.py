"""Benchmark: a NumPy matrix multiply in the judge's VM under the default guest CPU against
`cpu = "qemu64"` (qemu's old default, the 2003 baseline), the same run, JSON on stdout (#41).

One VM per CPU setting, both booted cold, 1 vCPU, on the same image: numpy with OpenBLAS (Debian's
libopenblas0-pthread, built for every x86-64 and choosing its kernels by CPU feature at run time).
In each, the guest times an N x N float64 matmul (best of R) and an elementwise np.exp (numpy's own
SIMD dispatch), and reports the guest's flags, the BLAS library loaded, numpy's CPU features and
the printed sum of the product, so the JSON shows both the speed ratio and whether the last digits
agree between the two instruction sets.

--smoke: N = 64, R = 1, on the af2017 example's image (numpy with Debian's reference BLAS, which
the test suite builds anyway), the default CPU's VM restored from the warm state af2017's stages
share (its timings are not the smoke run's to judge; qemu64's is booted cold, as a state saved for
it would be another CPU's): the same code, what the test suite runs.

Usage: python bench/cpu_matmul.py [--smoke] [--home DIR] [--n 512] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.host_lock import run_holding_host, trial_guests  # noqa: E402
from vmjudge.config import ImageRecipe, load_site  # noqa: E402
from vmjudge.config.layout import RunDir  # noqa: E402
from vmjudge.images.build import build_image  # noqa: E402
from vmjudge.vm import domain  # noqa: E402
from vmjudge.vm.job import Command, Job  # noqa: E402
from vmjudge.vm.runner import make_blank_disk, run_job  # noqa: E402

FULL_PACKAGES = ("python3-numpy", "libopenblas0-pthread")
SMOKE_PACKAGES = ("python3-numpy",)  # the af2017 example's recipe: the same image key, built once

GUEST = """
import json, sys, time
import numpy as np
n, repeats = int(sys.argv[1]), int(sys.argv[2])
rng = np.random.default_rng(41)
a, b = rng.random((n, n)), rng.random((n, n))
def best(f):
    times = []
    for _ in range(repeats):
        t = time.perf_counter(); f(); times.append(time.perf_counter() - t)
    return min(times)
product = a @ b
matmul = best(lambda: a @ b)
x = rng.random(1 << 20)
exp = best(lambda: np.exp(x))
maps = open("/proc/self/maps").read().splitlines()
blas = sorted({line.split()[-1] for line in maps if "blas" in line.split()[-1]})
features = getattr(np.core._multiarray_umath, "__cpu_features__", {})
flags = next(l for l in open("/proc/cpuinfo") if l.startswith("flags")).split(":", 1)[1].split()
print(json.dumps({"matmul_seconds": matmul, "exp_seconds": exp, "sum": repr(float(product.sum())),
                  "blas": blas, "numpy": np.__version__,
                  "numpy_features": {k: v for k, v in features.items() if k in ("SSSE3", "SSE42", "AVX", "FMA3",
                                                                                 "AVX2", "AVX512F")},
                  "avx2": "avx2" in flags, "fma": "fma" in flags}))
"""


def measure(site, image, cpu: str | None, n: int, repeats: int, coretype: str | None = None,
            warm: bool = False) -> dict:
    """One cold boot (`warm`: a restore) with `cpu` as site.toml's [vm] cpu (None: the accelerator's
    default), OpenBLAS choosing its kernels itself or, with `coretype`, told which (OPENBLAS_CORETYPE).
    A failed command gives {"failed": ...} with its output's end."""
    env = ("env", f"OPENBLAS_CORETYPE={coretype}") if coretype else ()
    run_site = replace(site, cpu=cpu, warm_start=warm)
    conn = domain.connect(site.uri)
    try:
        with RunDir(site.layout, "bench-cpu") as rd:
            make_blank_disk(rd.path / "home.qcow2", 64)
            run = run_job(conn, run_site, image, Job(commands=(
                Command("matmul", (*env, "python3", "-c", GUEST, str(n), str(repeats)), 1800.0),)),
                home_disk=rd.path / "home.qcow2", workdir=rd.path, console_log=rd.path / "console.log",
                vcpus=1, memory_mib=1024, label="bench-cpu")
    finally:
        conn.close()
    cmd = run.transcript.commands[0]
    if cmd.status != "ok":
        return {"cpu": cpu or "default", "openblas_coretype": coretype,
                "failed": f"{cmd.status}, exit {cmd.exit_code}",
                "output": bytes(cmd.output).decode(errors="replace")[-2000:]}
    found = json.loads(bytes(cmd.output).decode())
    guest = run.hardware["guest_cpu"] if run.hardware else {}
    return {"cpu": guest.get("setting"), "level": guest.get("level"), "model": guest.get("model"),
            "openblas_coretype": coretype, "start": run.start["mode"] if run.start else None,
            "boot_seconds": round(run.boot_seconds, 2), **found}


def arguments() -> argparse.ArgumentParser:
    """Its options, parsed before the host is taken (run_holding_host)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--home", type=Path, default=Path(os.environ.get("VMJUDGE_TEST_HOME", "/var/tmp/vmjudge-test")))
    ap.add_argument("--n", type=int, default=512, help="the matrices' size")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="N = 64, one repeat, on the af2017 example's image")
    return ap


def main(args: argparse.Namespace) -> None:
    trial_guests()
    site = load_site(args.home)
    site.layout.ensure()
    n, repeats = (64, 1) if args.smoke else (args.n, args.repeats)
    recipe = ImageRecipe(packages=SMOKE_PACKAGES if args.smoke else FULL_PACKAGES)
    image = build_image(site, recipe, progress=lambda m: print(m, file=sys.stderr))
    default = measure(site, image, None, n, repeats, warm=args.smoke)
    if "failed" in default:
        raise SystemExit(f"the matmul under the default CPU failed: {default}")
    old = auto = measure(site, image, "qemu64", n, repeats)
    # Debian's OpenBLAS 0.3.21 takes qemu64 (AuthenticAMD, family 15) for an Opteron and its kernel
    # stops with SIGILL there (measured 2026-11-26): the entry's own end under qemu64. The ratio is
    # then taken against OpenBLAS told to use its SSE3 kernels (Prescott), which qemu64 runs.
    if "failed" in auto:
        old = measure(site, image, "qemu64", n, repeats, coretype="Prescott")
        if "failed" in old:
            raise SystemExit(f"the matmul under qemu64 failed, also with Prescott's kernels: {auto} {old}")
    print(json.dumps({
        "benchmark": "cpu_matmul", "smoke": args.smoke, "accel": site.accel, "host": platform.node(), "n": n,
        "repeats": repeats, "packages": list(recipe.packages), "default": default, "qemu64": old, "qemu64_auto": auto,
        "matmul_ratio_qemu64_over_default": round(old["matmul_seconds"] / default["matmul_seconds"], 3),
        "exp_ratio_qemu64_over_default": round(old["exp_seconds"] / default["exp_seconds"], 3),
        "same_sum": default["sum"] == old["sum"]}, indent=1))


if __name__ == "__main__":
    run_holding_host(main, arguments())
