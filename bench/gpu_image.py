"""Benchmark: the GPU image (`[image] gpu = "nvidia-535"`) against the CPU base image, built in
the same run on the same host, and a CPU VM judging an entry on the GPU image (JSON on stdout).

No GPU is lent to the project's machines and a GPU domain is refused under TCG, so this checks
what can be checked without one, and exits 1 saying why if any check fails:
- images: both built with `build_image` in the benchmark's own home (kept for the next run; an
  image already built is reused and its build time is the one its manifest stored; --rebuild
  builds both again). Reported: build seconds, the dkms compile's seconds, root.sqfs and whole
  image bytes, Debian package counts, the driver's packages and versions, what the build removed
  again. Checked: the manifest lists the four driver packages with versions; `unsquashfs -ll`
  lists nvidia.ko and nvidia-uvm.ko under /lib/modules/KVER/ for the image's own kernel, and
  their vermagic (read from the files extracted from root.sqfs) is that kernel's; no gcc, cc1,
  kernel headers or dkms tree is left in the root; the CPU image has no nvidia package and no
  nvidia file, and its initramfs loads no ahci while the GPU image's does.
- guest, under tests.host_lock (one VM session per host; --wait-for-host SECONDS polls every
  60 s): three jobs run straight through the VM runner, reading the agent's hello frame: the CPU
  image (hello gpu: "this image has no GPU driver"), the GPU image (hello gpu: "none", "no GPU:
  …" with what loading nvidia.ko said; the command shows gpu-init's log, nvidia-smi failing and
  no /dev/nvidia* node), and the GPU image with a job marked "gpu": true, as a GPU stage's is
  (the agent must refuse it with an error frame and run no command); and the GPU image in a GPU
  stage's q35 domain without its hostdev (under TCG), which must find its CD-ROM on SATA (ahci) and
  run the command. Their boot seconds show what loading the driver costs at boot.
- judge: a tiny answer-lines challenge with `[image] gpu = "nvidia-535"` and no `[vm] gpu` taken
  through `challenge add`, `submit`, `daemon` and `show` in a fresh home inside --home: its entry's
  setup.sh runs `nvidia-smi || true`; the entry must be scored 1.0, and the organiser's prep.log
  must open with the guest's GPU line ("gpu: none: no GPU: ...") and show nvidia-smi's failure, and
  each VM stage's manifest must record the agent's hello as `manifest["gpu"]["guest"]`, state "none".
  Then the challenge's replica ISO is built and booted in plain qemu, as a participant would: its
  init must have run gpu-init (its log says no NVIDIA card was found) with the driver in its root.

Measured on 2026-11-24, this machine (2 cores, TCG, other sessions running beside it): the GPU
image built in 182.8 s (128.4 s of it the dkms compile) against 31.4 s for the CPU image; root.sqfs
270 MB against 148 MB (1.83x; the whole image 280 MB against 158 MB), 140 Debian packages against
127, 43 build packages (dkms, gcc, binutils, make, the headers, …) removed again; nvidia.ko 65 MB
(40 MB of it NVIDIA's .rodata, no debug info to strip) and nvidia-uvm.ko 3 MB, both with the guest
kernel's vermagic "6.1.0-56-amd64 SMP preempt mod_unload modversions". Boot to hello: the GPU image
8.0 s, the CPU image 8.3 s (before gpu-init skipped a machine with no NVIDIA card, nvidia.ko failing
twice cost the GPU image 2.2 s: 11.2 s against 9.0 s). The entry on the GPU image was scored 1.0, its
stages 11.4-11.6 s each (8.2-8.8 s of boot), the daemon 36.6 s; the GPU stage's job was refused.
A second run on the lead's merge (images reused): the q35 domain without its card booted to hello in
7.9 s and ran the command with the CD-ROM on SATA; each VM stage's manifest recorded the guest's GPU
as none, and prep.log opened with "gpu: none: no GPU: no NVIDIA display or 3D controller on the PCI
bus: the driver was not loaded"; the entry scored 1.0, the daemon 37.6 s. A third run: the GPU
challenge's replica ISO (282 MB) booted in plain qemu to its prompt in 8.9 s, gpu-init having found no
NVIDIA card and the driver's load list in its root.

Not in CI: the GPU image adds a download of about 120 MB of Debian packages and a compile of
NVIDIA's kernel interface to every clean run, to check what this benchmark shows.

--smoke: no GPU image (a download of about 120 MB and the dkms compile): the CPU image's figures and
checks, and its one guest run (its hello must say "this image has no GPU driver"); nothing that
needs the GPU image (its checks, its guest runs, the judge, the replica). What the test suite runs.

Usage: python bench/gpu_image.py [--smoke] [--home /var/tmp/vmjudge-bench-gpu] [--rebuild] [--keep]
                                 [--wait-for-host 0]
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from image_bench import image_figures, parse_args, vmjudge, with_host, write_entry  # noqa: E402

from tests.replica_console import Console  # noqa: E402
from vmjudge.config import ImageRecipe  # noqa: E402
from vmjudge.config.layout import RunDir  # noqa: E402
from vmjudge.errors import InfrastructureError  # noqa: E402
from vmjudge.images import gpu_driver  # noqa: E402
from vmjudge.images.image import GuestImage  # noqa: E402
from vmjudge.vm import domain, runner  # noqa: E402
from vmjudge.vm.domain_xml import DomainSpec, domain_xml  # noqa: E402
from vmjudge.vm.job import Command, Job  # noqa: E402
from vmjudge.vm.runner import make_blank_disk, run_job  # noqa: E402

GPU = ImageRecipe(gpu="nvidia-535")
COMPILERS = re.compile(r"/usr/bin/(gcc|cc|x86_64-linux-gnu-gcc)(-\d+)?$|/cc1$|^/usr/src/linux-headers|^/var/lib/dkms")
LOOK = ("cat /run/vmjudge-gpu.log; echo; nvidia-smi; echo \"nvidia-smi exit $?\"; "
        "ls /dev | grep -c '^nvidia' | sed 's/^/device nodes: /'")
SETUP = "#!/bin/sh\nnvidia-smi || true\necho; cat /run/vmjudge-gpu.log\n"
NEXT = "#!/bin/sh\necho \"$1,1\" >> answers.txt\n"
TRAINING, TEST = ("g01", "g02"), ("g03",)


def fail(why: str) -> None:
    raise SystemExit(f"gpu_image benchmark: {why}")


LISTED = re.compile(r"^\S+ \S+\s+(?:\d+|\d+,\s*\d+) \S+ \S+ (.*)$")


def listing(image: GuestImage) -> list[str]:
    """Every path in root.sqfs, as `unsquashfs -ll` names it; /lib is a link to usr/lib (merged
    /usr), so each path under /usr/lib is also given as under /lib."""
    out = subprocess.run(["unsquashfs", "-ll", "-d", "", str(image.root)], capture_output=True, text=True,
                         check=True).stdout
    paths = [m.group(1).split(" -> ")[0] for m in map(LISTED.match, out.splitlines()) if m]
    return paths + [p[len("/usr"):] for p in paths if p.startswith("/usr/lib/")]


def check_gpu_image(gpu: GuestImage, scratch: Path) -> dict:
    m = gpu.manifest
    section = m.get("gpu") or fail("the GPU image's manifest has no gpu section")
    kver = m["kernel_version"]
    packages = section["packages"]
    wanted = gpu_driver.driver("nvidia-535").packages
    if sorted(packages) != sorted(wanted) or not all(packages.values()):
        fail(f"the manifest's driver packages are {packages}, not versions of {list(wanted)}")
    files = listing(gpu)
    modules = [f"/lib/modules/{kver}/{gpu_driver.MODULE_DIR}/{name}.ko" for name in ("nvidia", "nvidia-uvm")]
    for path in modules:
        if path not in files:
            fail(f"{path} is not in {gpu.root} (unsquashfs -ll)")
    left = sorted(p for p in files if COMPILERS.search(p))
    if left:
        fail(f"build tools are left in the GPU image's root: {left[:10]}")
    # The modules and one of the kernel's own, out of root.sqfs, for their vermagic.
    reference = next(p for p in files if p.startswith(f"/lib/modules/{kver}/kernel/") and p.endswith(".ko"))
    out = scratch / "sqfs"
    inside = ["usr" + p if "/usr" + p in files else p.lstrip("/") for p in [*modules, reference]]
    subprocess.run(["unsquashfs", "-q", "-n", "-d", str(out), str(gpu.root), *inside], check=True,
                   capture_output=True)
    got = dict(zip([*modules, reference], (out / p for p in inside), strict=True))
    vermagic = {p: gpu_driver.check_vermagic(got[p], kver, got[reference]) for p in modules}
    sizes = {p: got[p].stat().st_size for p in modules}
    shutil.rmtree(out)
    load_list = f"/{gpu_driver.LOAD_LIST}"
    if load_list not in files:
        fail(f"{load_list} is not in the GPU image's root")
    if not any("/ahci.ko" in p for p in m["initramfs_modules"]):
        fail("the GPU image's initramfs does not load ahci in the judge's boot")
    return {"driver": section["driver"], "driver_version": section["version"], "packages": packages,
            "kernel_version": kver, "module_vermagic": vermagic, "module_bytes": sizes,
            "dkms_seconds": section["dkms_seconds"], "removed_packages": len(section["removed"]),
            "removed": sorted(section["removed"]), "no_compiler_left": True,
            "nvidia_files": len([p for p in files if "nvidia" in p.lower()])}


def check_cpu_image(cpu: GuestImage) -> dict:
    nvidia = sorted(p for p in cpu.manifest["packages"] if "nvidia" in p)
    files = [p for p in listing(cpu) if "nvidia" in p.lower() and "/kernel/" not in p]  # in-tree nouveau-era names
    if nvidia or files:
        fail(f"the CPU image has NVIDIA packages {nvidia} or files {files[:5]}")
    if any("/ahci.ko" in p for p in cpu.manifest["initramfs_modules"]):
        fail("the CPU image's initramfs loads ahci in the judge's boot, which only a GPU image needs")
    return {"nvidia_packages": 0, "ahci_in_judge_boot": False}


class GpuJob(Job):
    """A job as a GPU stage's is: marked "gpu": true (run_job marks it only when it lends a card,
    after the card's preflight, which a host without one cannot pass)."""

    def job_json(self, nonce: str, gpu: bool = False) -> bytes:
        return super().job_json(nonce, gpu=True)


def q35_without_card(spec: DomainSpec) -> str:
    """A GPU stage's domain as domain_xml makes it (machine q35, the CD-ROM on SATA, a PCIe root
    port), without the hostdev and runnable under TCG: what can be booted here of a GPU VM, to see
    that the GPU image's guest finds its CD through ahci."""
    dom = ET.fromstring(domain_xml(replace(spec, accel="kvm", gpu="0000:65:00.0")))
    devices = dom.find("devices")
    assert devices is not None
    for hostdev in devices.findall("hostdev"):
        devices.remove(hostdev)
    if spec.accel != "kvm":
        dom.set("type", "qemu")
        for cpu in dom.findall("cpu"):
            dom.remove(cpu)
    return ET.tostring(dom, encoding="unicode")


def guest_runs(site, cpu: GuestImage, gpu: GuestImage | None) -> dict:
    """The jobs straight through the VM runner, checked; with no GPU image (--smoke), the CPU image's alone."""
    conn = domain.connect(site.uri)
    runs: dict = {}
    look = Job(commands=(Command("look", ("sh", "-c", LOOK), 120, output_limit=16384),))
    jobs = [("cpu_image", cpu, look)]
    if gpu is not None:
        jobs += [("gpu_image", gpu, look), ("gpu_image_gpu_stage", gpu, GpuJob(commands=look.commands)),
                 ("gpu_image_q35", gpu, look)]
    try:
        with RunDir(site.layout, "bench-gpu") as rd_obj:
            rd = rd_obj.path
            for label, image, job in jobs:
                make_blank_disk(rd / f"{label}.qcow2", 64)
                if label == "gpu_image_q35":
                    runner.domain_xml = q35_without_card  # type: ignore[assignment]
                try:
                    run = run_job(conn, site, image, job, home_disk=rd / f"{label}.qcow2", workdir=rd,
                                  console_log=rd / f"{label}.log", vcpus=1, memory_mib=1024, label=f"bench-{label}")
                except InfrastructureError as exc:
                    runs[label] = {"refused": str(exc)}
                    continue
                finally:
                    runner.domain_xml = domain_xml
                hello = run.transcript.hello or {}
                output = run.transcript.commands[0].output.decode(errors="replace") if run.transcript.commands else ""
                runs[label] = {"boot_s": round(run.boot_seconds, 2), "total_s": round(run.total_seconds, 2),
                               "hello_gpu": hello.get("gpu"), "agent": hello.get("agent"), "output": output}
    finally:
        conn.close()
    c = runs["cpu_image"]
    if c.get("hello_gpu") != {"state": "none", "why": "this image has no GPU driver"}:
        fail(f"the CPU image's hello said gpu {c.get('hello_gpu')!r}")
    if gpu is None:
        return runs
    g, refused, q35 = runs["gpu_image"], runs["gpu_image_gpu_stage"], runs["gpu_image_q35"]
    if "nvidia-smi exit" not in q35.get("output", ""):
        fail(f"the GPU image on q35 (its CD-ROM on SATA) did not run its command: {q35}")
    hg = g.get("hello_gpu") or {}
    if hg.get("state") != "none" or not str(hg.get("why", "")).startswith("no GPU: "):
        fail(f"the GPU image without a GPU said gpu {hg!r} in its hello, not \"none\" with \"no GPU: …\"")
    if "device nodes: 0" not in g["output"] or "nvidia-smi exit 0" in g["output"]:
        fail(f"the GPU image without a GPU shows device nodes or a working nvidia-smi:\n{g['output']}")
    if "the GPU passed to this VM did not work: no GPU: " not in refused.get("refused", ""):
        fail(f"a GPU stage's job on the GPU image without a GPU was not refused by the agent: {refused}")
    return runs


def write_challenge(directory: Path, name: str) -> None:
    for sub in ("training", "test", "reference"):
        (directory / sub).mkdir(parents=True)
    for r in TRAINING + TEST:
        (directory / ("training" if r in TRAINING else "test") / f"{r}.txt").write_text("1\n")
    (directory / "training" / "RECORDS").write_text("\n".join(TRAINING) + "\n")
    (directory / "test" / "RECORDS").write_text("\n".join(TEST) + "\n")
    (directory / "reference" / "REFERENCE.csv").write_text("".join(f"{r},1\n" for r in TEST))
    (directory / "challenge.toml").write_text(f"""name = "{name}"
[entry]
required = ["setup.sh", "next.sh", "answers.txt"]
[image]
gpu = "nvidia-535"
[vm]
vcpus = 1
memory = 1024
home = 64
[limits]
setup = 300
per_record = 120
quiz_total = 600
exam_total = 600
[results]
style = "answer-lines"
submitted = "answers.txt"
[score]
scorer = "accuracy"
""")


def judge(home: Path) -> dict:
    work = home / "bench"
    work.mkdir()
    write_challenge(work / "challenge", "gpu-bench")
    vmjudge(home, "challenge", "add", str(work / "challenge"))
    archive = write_entry(work / "entry.tar.gz", SETUP, NEXT, "".join(f"{r},1\n" for r in TRAINING))
    entry = int(vmjudge(home, "submit", "gpu-bench", str(archive), "--owner", "gpu").stdout)
    started = time.monotonic()
    vmjudge(home, "daemon", "--slots", "1", "--until-idle", timeout=3600)
    seconds = time.monotonic() - started
    doc = json.loads(vmjudge(home, "show", str(entry), "--json", "--organiser").stdout)
    if (doc["state"], doc["outcome"], doc["scores"].get("score")) != ("done", "scored", 1.0):
        fail(f"the entry (id {entry}) on the GPU image was not scored 1.0: state {doc['state']}, outcome "
             f"{doc['outcome']}, reason {doc['reason']}; its home is kept at {home}.\n{doc['report']}")
    prep = doc["organiser"]["logs"].get("prep.log", {}).get("text", "")
    if "NVIDIA-SMI has failed" not in prep:
        fail(f"prep.log does not show nvidia-smi failing in the VM without a GPU:\n{prep}")
    stages, guest = {}, {}
    for a in doc["organiser"]["attempts"]:
        m = a["manifest"]
        stages[a["stage"]] = {"boot_s": m.get("boot_seconds"), "run_s": m.get("run_seconds"), "status": a["status"]}
        if isinstance(m.get("gpu"), dict) and "guest" in m["gpu"]:
            guest[a["stage"]] = m["gpu"]["guest"]
    bad = {s: g for s, g in guest.items() if g.get("state") != "none"}
    if bad or set(guest) != {"prep", "quiz", "exam"}:
        fail(f"each VM stage's manifest must record the agent's GPU as none: {guest or 'none recorded'}")
    if not prep.startswith("gpu: none: no GPU: "):
        fail(f"prep.log does not open with the guest's GPU line:\n{prep[:500]}")
    return {"entry": entry, "outcome": doc["outcome"], "scores": doc["scores"], "stages": stages,
            "daemon_seconds": round(seconds, 1), "replica": replica(home, work),
            "hello_gpu_in_stage_manifest": guest, "prep_log_first_line": prep.splitlines()[0],
            "prep_log_nvidia_smi": [line for line in prep.splitlines() if "NVIDIA" in line or "insmod" in line][:6]}


def replica(home: Path, work: Path) -> dict:
    """The GPU challenge's replica ISO, booted as a participant would (plain qemu, the participants' guide's
    way, here without a GPU): its init must have run gpu-init, which found no NVIDIA card."""
    iso = work / "replica.iso"
    started = time.monotonic()
    vmjudge(home, "replica", "build", "gpu-bench", "-o", str(iso), timeout=1800)
    built = time.monotonic() - started
    console = Console(["qemu-system-x86_64", "-m", "2048", "-accel", os.environ.get("VMJUDGE_ACCEL", "tcg"),
                       "-display", "none", "-cdrom", str(iso), "-boot", "d", "-nic", "none", "-serial", "stdio"])
    try:
        started = time.monotonic()
        console.expect(r"replica# ", 300)
        booted = time.monotonic() - started
        # The marker is typed with quotes in it, so only the output matches it.
        console.send("cat /run/vmjudge-gpu.log; ls /opt/vmjudge/gpu-modules.list; echo '@@GPU''-END@@'")
        said = console.expect(r"(?s)cat /run/vmjudge-gpu.log[^\n]*\n(.*?)@@GPU-END@@", 120).group(1)
    finally:
        console.close()
    if "no NVIDIA display or 3D controller on the PCI bus" not in said or "gpu-modules.list" not in said:
        fail(f"the replica's init did not run gpu-init (or the driver is not in its root):\n{said}")
    return {"iso_bytes": iso.stat().st_size, "build_s": round(built, 1), "boot_to_prompt_s": round(booted, 1),
            "gpu_log": said.strip().splitlines()[:3]}


def main() -> None:
    args, site = parse_args(__doc__, Path("/var/tmp/vmjudge-bench-gpu"))
    cpu, cpu_fig = image_figures(site, ImageRecipe(), args.rebuild)
    if args.smoke:
        cpu_fig["checks"] = check_cpu_image(cpu)
        guest = with_host("the GPU image benchmark", args.wait_for_host, lambda: guest_runs(site, cpu, None))
        print(json.dumps({"benchmark": "gpu_image", "smoke": True, "accel": site.accel,
                          "date": time.strftime("%Y-%m-%d"), "host": {"node": platform.node(), "cpus": os.cpu_count()},
                          "images": {"cpu": cpu_fig}, "guest": guest}, indent=2))
        return
    gpu, gpu_fig = image_figures(site, GPU, args.rebuild)
    with tempfile.TemporaryDirectory(dir=args.home) as scratch:
        gpu_fig["checks"] = check_gpu_image(gpu, Path(scratch))
    cpu_fig["checks"] = check_cpu_image(cpu)
    ratio = {k: round(gpu_fig[k] / cpu_fig[k], 2) for k in ("build_seconds", "root_sqfs_bytes", "image_bytes")}
    home = Path(tempfile.mkdtemp(prefix="run-", dir=args.home))
    os.chmod(home, 0o711)  # libvirt's qemu crosses it to the entries' disks
    (home / "images").symlink_to(site.layout.images)

    def vms() -> tuple[dict, dict]:
        return guest_runs(site, cpu, gpu), judge(home)

    guest, judged = with_host("the GPU image benchmark", args.wait_for_host, vms)
    if not args.keep:
        shutil.rmtree(home)
    print(json.dumps({
        "benchmark": "gpu_image", "smoke": False, "accel": site.accel, "date": time.strftime("%Y-%m-%d"),
        "host": {"node": platform.node(), "cpus": os.cpu_count()},
        "images": {"cpu": cpu_fig, "gpu": gpu_fig, "ratio_gpu_over_cpu": ratio},
        "guest": guest, "judge": judged,
    }, indent=2))


if __name__ == "__main__":
    main()
