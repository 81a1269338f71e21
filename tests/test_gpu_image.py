"""The GPU image (#14), host only: no image build, no VM (bench/gpu_image.py builds and boots one).

The recipe's key and sources, the kernel module's vermagic read from a real ELF file, what the
build keeps after pruning, the GPU initramfs's SATA driver, the guest's gpu-init run against a
fake root, the agent's probe against a fake nvidia-smi and fake /sys and /dev/kmsg, and the
agent's refusal of a GPU stage without a working GPU, read back as the host reads frames."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vmjudge.config import ImageRecipe, load_site
from vmjudge.errors import ImageError
from vmjudge.images import build, gpu_driver, initramfs
from vmjudge.images.guest import frames, gpu
from vmjudge.images.guest.cpu import read_cpu

KVER = "6.1.0-test"
VERMAGIC = f"{KVER} SMP preempt mod_unload modversions "
GUEST = Path(build.GUEST_DIR)
# make setup installs busybox-static (and binutils, for objcopy, with gcc): no test here is skipped for them.
BUSYBOX = shutil.which("busybox") or "/usr/bin/busybox"


# --- the recipe ------------------------------------------------------------------------------

def test_a_cpu_recipe_document_is_what_it_was(tmp_path):
    """Same keys, sources and packages as before #14: a CPU challenge's image key does not move."""
    site = load_site(tmp_path)
    doc = build.recipe_document(site, ImageRecipe())
    assert sorted(doc) == ["code", "packages", "pip", "sources", "suite"]
    assert doc["sources"] == ["deb http://deb.debian.org/debian bookworm main",
                              "deb http://deb.debian.org/debian bookworm-updates main",
                              "deb http://deb.debian.org/debian-security bookworm-security main"]
    assert doc["packages"] == ["busybox-static", "e2fsprogs", "linux-image-amd64", "python3", "tiny-initramfs"]
    contrib = build.recipe_document(site, ImageRecipe(components=("main", "contrib")))
    assert "gpu" not in contrib and contrib["sources"][0].endswith("bookworm main contrib")


def test_a_gpu_recipe_names_its_driver_and_areas(tmp_path):
    site = load_site(tmp_path)
    cpu = build.recipe_document(site, ImageRecipe())
    gpu_doc = build.recipe_document(site, ImageRecipe(gpu="nvidia-535"))
    assert gpu_doc["gpu"]["driver"] == "nvidia-535"
    assert set(gpu_doc["gpu"]["packages"]) == {"nvidia-tesla-535-kernel-dkms", "firmware-nvidia-tesla-535-gsp",
                                               "libnvidia-tesla-535-cuda1", "libnvidia-tesla-535-ml1",
                                               "nvidia-tesla-535-smi"}
    assert gpu_doc["gpu"]["build_packages"] == ["linux-headers-amd64"]
    # The GSP firmware is in non-free-firmware, the driver in non-free, what it needs of the free kind in contrib.
    assert all(s.endswith(" main contrib non-free non-free-firmware") for s in gpu_doc["sources"])
    assert gpu_doc["packages"] == cpu["packages"]  # the driver's packages are its own part of the key
    assert build.image_key(site, ImageRecipe(gpu="nvidia-535")) != build.image_key(site, ImageRecipe())
    # An area the recipe names already is not named twice.
    both = build.recipe_document(site, ImageRecipe(components=("main", "non-free"), gpu="nvidia-535"))
    assert both["sources"][0].endswith(" bookworm main non-free contrib non-free-firmware")


# --- the kernel module ------------------------------------------------------------------------

def fake_module(path: Path, info: dict[str, str]) -> Path:
    """A real ELF relocatable file with a .modinfo section, as a .ko has."""
    path.parent.mkdir(parents=True, exist_ok=True)
    blob, section = path.with_suffix(".data"), path.with_suffix(".modinfo")
    blob.write_bytes(b"\0" * 64)
    section.write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in info.items()))
    subprocess.run(["objcopy", "-I", "binary", "-O", "elf64-x86-64", "-B", "i386:x86-64", str(blob), str(path)],
                   check=True)
    subprocess.run(["objcopy", "--add-section", f".modinfo={section}", "--set-section-flags", ".modinfo=alloc,readonly",
                    str(path)], check=True)
    blob.unlink()
    section.unlink()
    return path


def test_modinfo_and_vermagic_are_read_from_the_elf(tmp_path):
    mod = fake_module(tmp_path / "nvidia.ko", {"license": "NVIDIA", "name": "nvidia", "vermagic": VERMAGIC})
    ref = fake_module(tmp_path / "isofs.ko", {"name": "isofs", "vermagic": VERMAGIC})
    assert gpu_driver.modinfo(mod)["name"] == "nvidia"
    assert gpu_driver.check_vermagic(mod, KVER, ref) == VERMAGIC
    other = fake_module(tmp_path / "old.ko", {"name": "nvidia", "vermagic": "6.1.0-50-amd64 SMP preempt mod_unload "
                                                                            "modversions "})
    with pytest.raises(ImageError, match="built for another kernel .*6.1.0-50-amd64"):
        gpu_driver.check_vermagic(other, KVER, ref)
    # The same release but another build (no modversions): refused too.
    nomod = fake_module(tmp_path / "nomod.ko", {"name": "nvidia", "vermagic": f"{KVER} SMP preempt mod_unload "})
    with pytest.raises(ImageError, match="another kernel"):
        gpu_driver.check_vermagic(nomod, KVER, ref)
    (tmp_path / "text.ko").write_text("not a module")
    with pytest.raises(ImageError, match="not a 64-bit little-endian ELF"):
        gpu_driver.modinfo(tmp_path / "text.ko")


def pruned_tree(root: Path, modules: tuple[str, ...] = ("nvidia", "nvidia-uvm")) -> Path:
    """lib/modules/KVER after the build's pruning and depmod: an in-tree module and the driver's."""
    d = root / "lib" / "modules" / KVER
    fake_module(d / "kernel/fs/isofs/isofs.ko", {"name": "isofs", "vermagic": VERMAGIC})
    deps = {"kernel/fs/isofs/isofs.ko": []}
    for m in modules:
        rel = f"{gpu_driver.MODULE_DIR}/{m}.ko"
        fake_module(d / rel, {"name": m.replace("-", "_"), "vermagic": VERMAGIC})
        deps[rel] = [] if m == "nvidia" else [f"{gpu_driver.MODULE_DIR}/nvidia.ko"]
    (d / "modules.dep").write_text("".join(f"{m}: {' '.join(ds)}\n" for m, ds in deps.items()))
    (root / "opt" / "vmjudge").mkdir(parents=True)
    return d


def test_finish_checks_the_modules_after_pruning_and_writes_the_load_order(tmp_path):
    pruned_tree(tmp_path)
    section = gpu_driver.finish(tmp_path, "nvidia-535", KVER, {"driver": "nvidia-535"})
    assert [m["path"] for m in section["modules"]] == [f"/lib/modules/{KVER}/extra/nvidia/nvidia.ko",
                                                       f"/lib/modules/{KVER}/extra/nvidia/nvidia-uvm.ko"]
    assert {m["vermagic"] for m in section["modules"]} == {VERMAGIC}
    assert (tmp_path / gpu_driver.LOAD_LIST).read_text().split() == ["extra/nvidia/nvidia.ko",
                                                                     "extra/nvidia/nvidia-uvm.ko"]


def test_finish_refuses_a_module_the_pruning_lost(tmp_path):
    pruned_tree(tmp_path, modules=("nvidia",))
    with pytest.raises(ImageError, match="nvidia-uvm.ko is missing .* after pruning"):
        gpu_driver.finish(tmp_path, "nvidia-535", KVER, {})
    assert not (tmp_path / gpu_driver.LOAD_LIST).exists()


def test_the_build_tools_purged_never_include_what_the_image_keeps():
    d = gpu_driver.driver("nvidia-535")
    installed = {"dkms", "gcc", "make", d.dkms_package, "linux-headers-amd64", f"linux-headers-{KVER}", "python3"}
    assert gpu_driver.build_tools(d, KVER, installed, {"python3"}) == [
        d.dkms_package, "dkms", "linux-headers-amd64", f"linux-headers-{KVER}"]
    # A challenge that asks for dkms or the headers itself keeps them (gcc then stays as their dependency).
    assert gpu_driver.build_tools(d, KVER, installed, {"dkms", "linux-headers-amd64"}) == [
        d.dkms_package, f"linux-headers-{KVER}"]


def test_the_pruning_leaves_the_drivers_directory_alone():
    assert not any(f"kernel/{p}/".startswith(gpu_driver.MODULE_DIR) or gpu_driver.MODULE_DIR.startswith(p)
                   for p in build.kernel_modules.PRUNED)


# --- the initramfs ----------------------------------------------------------------------------

def initrd(tmp_path: Path, gpu_image: bool) -> tuple[list[str], list[str]]:
    d = tmp_path / ("gpu" if gpu_image else "cpu")
    mods = tmp_path / d / "lib" / "modules" / KVER
    mods.mkdir(parents=True)
    deps = {f"kernel/x/{m}.ko": [] for m in initramfs.MODULES + initramfs.REPLICA_MODULES}
    deps["kernel/x/ahci.ko"] = ["kernel/x/libahci.ko"]
    deps["kernel/x/libahci.ko"] = []
    (mods / "modules.dep").write_text("".join(f"{m}: {' '.join(ds)}\n" for m, ds in deps.items()))
    for m in deps:
        (mods / m).parent.mkdir(parents=True, exist_ok=True)
        (mods / m).write_bytes(b"\x7fELF" + m.encode())
    (d / "usr" / "bin").mkdir(parents=True)
    (d / "usr" / "bin" / "busybox").write_bytes(b"BUSYBOX")
    out = d / "initrd.img"
    initramfs.build_initramfs(d, KVER, GUEST / "initramfs-init", out, gpu=gpu_image)
    members = initramfs.read_newc(gzip.decompress(out.read_bytes()))
    return _paths(members["modules.list"].data), _paths(members["modules-replica.list"].data)


def _paths(load_list: bytes) -> list[str]:
    return [line.split()[0] for line in load_list.decode().splitlines()]


def test_the_gpu_initramfs_loads_ahci_in_the_judges_boot(tmp_path):
    """A GPU VM (q35) has its CD-ROM on SATA; a CPU image's initramfs stays as it was."""
    gpu_order, gpu_replica = initrd(tmp_path, True)
    cpu_order, cpu_replica = initrd(tmp_path, False)
    assert gpu_order[-2:] == ["kernel/x/libahci.ko", "kernel/x/ahci.ko"]
    assert gpu_order[:-2] == cpu_order and "kernel/x/ahci.ko" not in cpu_order
    assert "kernel/x/ahci.ko" in cpu_replica and "kernel/x/ahci.ko" not in gpu_replica


# --- the guest's gpu-init ---------------------------------------------------------------------

FAKE_BUSYBOX = """#!/bin/sh
# busybox as gpu-init meets it in a guest, for a fake root: insmod stands for the kernel (it
# refuses when the root says so), mknod records; every other applet is busybox's.
R=$FAKE_ROOT
case "$1" in
uname) echo 6.1.0-test ;;
insmod)
    echo "insmod $2" >> "$R/calls"
    if [ -e "$R/insmod-refuses" ]; then
        echo "insmod: can't insert '$2': Invalid module format" >&2
        echo "nvidia: disagrees about version of symbol module_layout" >> "$R/kernel-log"
        exit 1
    fi
    name=$(basename "$2" .ko | tr - _)
    mkdir -p "$R/sys/module/$name"
    [ "$name" = nvidia ] && mkdir -p "$R/proc/driver/nvidia/gpus/0000:01:00.0"
    [ "$name" = nvidia_uvm ] && echo "509 nvidia-uvm" >> "$R/proc/devices"
    echo "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.216.03" >> "$R/kernel-log"
    ;;
mknod) echo "mknod ${2#"$R"} $3 $4 $5" >> "$R/calls"; : > "$2" ;;
dmesg) cat "$R/kernel-log" 2>/dev/null ;;
*) exec REAL "$@" ;;
esac
"""


def pci_device(sys_dir: Path, address: str, vendor: str, pci_class: str) -> None:
    dev = sys_dir / "bus/pci/devices" / address
    dev.mkdir(parents=True)
    (dev / "vendor").write_text(vendor + "\n")
    (dev / "class").write_text(pci_class + "\n")


def run_gpu_init(tmp_path: Path, *, driver: bool, gpu_present: bool, refuses: bool = False) -> Path:
    root = tmp_path / "root"
    for d in ("run", "dev", "proc", "sys/module", "opt/vmjudge", f"lib/modules/{KVER}/extra/nvidia"):
        (root / d).mkdir(parents=True)
    (root / "proc/devices").write_text("Character devices:\n  1 mem\n")
    if driver:
        (root / gpu_driver.LOAD_LIST).write_text("extra/nvidia/nvidia.ko\nextra/nvidia/nvidia-uvm.ko\n")
    pci_device(root / "sys", "0000:00:01.0", "0x8086", "0x060100")  # the machine's own bridge
    pci_device(root / "sys", "0000:00:02.0", "0x10de", "0x0c0330")  # NVIDIA, but a USB controller
    if gpu_present:
        pci_device(root / "sys", "0000:01:00.0", "0x10de", "0x030200")  # a T4: 3D controller
    if refuses:
        (root / "insmod-refuses").touch()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "busybox").write_text(FAKE_BUSYBOX.replace("REAL", str(BUSYBOX)))
    (bin_dir / "busybox").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "FAKE_ROOT": str(root)}
    # The host's sh, not busybox's: busybox sh would run its own applets for `busybox insmod`, not PATH's.
    proc = subprocess.run(["/bin/sh", str(GUEST / "gpu-init"), str(root)], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return root


def calls(root: Path) -> list[str]:
    return (root / "calls").read_text().splitlines() if (root / "calls").exists() else []


def test_gpu_init_loads_the_driver_and_makes_the_device_nodes(tmp_path):
    root = run_gpu_init(tmp_path, driver=True, gpu_present=True)
    modules = f"{root}/lib/modules/{KVER}/extra/nvidia"
    assert calls(root) == [f"insmod {modules}/nvidia.ko", f"insmod {modules}/nvidia-uvm.ko",
                           "mknod /dev/nvidiactl c 195 255", "mknod /dev/nvidia0 c 195 0",
                           "mknod /dev/nvidia-uvm c 509 0", "mknod /dev/nvidia-uvm-tools c 509 1"]
    for node in ("nvidiactl", "nvidia0", "nvidia-uvm", "nvidia-uvm-tools"):
        assert stat.S_IMODE((root / "dev" / node).stat().st_mode) == 0o666, node
    log = (root / "run/vmjudge-gpu.log").read_text()
    assert "insmod extra/nvidia/nvidia.ko: exit 0" in log and "NVRM: loading NVIDIA" in log
    assert log.splitlines()[-1] == "device nodes: nvidia-uvm nvidia-uvm-tools nvidia0 nvidiactl"


def test_gpu_init_without_a_gpu_loads_nothing_and_says_so(tmp_path):
    root = run_gpu_init(tmp_path, driver=True, gpu_present=False)
    assert calls(root) == [] and not list((root / "dev").iterdir())
    assert (root / "run/vmjudge-gpu.log").read_text() == ("no NVIDIA display or 3D controller on the PCI bus: "
                                                          "the driver was not loaded\n")


def test_gpu_init_logs_a_driver_that_will_not_load_and_carries_on(tmp_path):
    root = run_gpu_init(tmp_path, driver=True, gpu_present=True, refuses=True)
    assert calls(root) == [f"insmod {root}/lib/modules/{KVER}/extra/nvidia/nvidia.ko"]  # uvm needs nvidia: not tried
    assert not list((root / "dev").iterdir())
    log = (root / "run/vmjudge-gpu.log").read_text()
    assert "insmod extra/nvidia/nvidia.ko: exit 1: insmod: can't insert" in log and "Invalid module format" in log
    assert "nvidia: disagrees about version of symbol module_layout" in log


def test_gpu_init_does_nothing_on_a_cpu_image(tmp_path):
    root = run_gpu_init(tmp_path, driver=False, gpu_present=True)
    assert calls(root) == [] and not (root / "run/vmjudge-gpu.log").exists()


def test_init_and_the_replicas_init_run_gpu_init_before_the_agent():
    init = (GUEST / "init").read_text()
    line = "[ -f /opt/vmjudge/gpu-modules.list ] && busybox sh /opt/vmjudge/gpu-init"
    assert line in init and init.index(line) < init.index("import agent")
    replica = (Path(build.__file__).parent.parent / "replica" / "boot" / "init").read_text()
    assert line in replica and replica.index(line) < replica.index("exec busybox init")
    assert f"/{gpu_driver.LOAD_LIST}" == gpu.GPU_LIST
    assert "gpu.py" in build.GUEST_FILES and "gpu-init" in build.GUEST_FILES


# --- the agent's probe ------------------------------------------------------------------------

def fake_smi(tmp_path: Path, body: str) -> Path:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path}/smi-args\n{body}\n")
    smi.chmod(0o755)
    return smi


def guest_tree(tmp_path: Path, *, driver: bool = True, loaded: bool = True, card: bool = True,
               log: str = "", kmsg: str = "") -> dict:
    sys_dir = tmp_path / "sys"
    (sys_dir / "module").mkdir(parents=True)
    if loaded:
        (sys_dir / "module" / "nvidia").mkdir()
    if card:
        dev = sys_dir / "bus/pci/devices/0000:01:00.0"
        dev.mkdir(parents=True)
        (dev / "vendor").write_text("0x10de\n")
        (dev / "class").write_text("0x030200\n")
    gpu_list = tmp_path / "gpu-modules.list"
    if driver:
        gpu_list.write_text("extra/nvidia/nvidia.ko\n")
    (tmp_path / "gpu.log").write_text(log)
    (tmp_path / "kmsg").write_text(kmsg)
    return {"gpu_list": str(gpu_list), "load_log": str(tmp_path / "gpu.log"), "sys_dir": str(sys_dir),
            "kmsg": str(tmp_path / "kmsg")}


def test_probe_reports_a_working_card(tmp_path):
    smi = fake_smi(tmp_path, 'echo "Tesla T4, 15360, 535.216.03"')
    found = gpu.probe(smi=str(smi), **guest_tree(tmp_path))
    assert found == {"state": "ok", "name": "Tesla T4", "memory_mib": 15360, "driver": "535.216.03",
                     "line": "Tesla T4, 15360, 535.216.03"}
    assert (tmp_path / "smi-args").read_text().split() == list(gpu.QUERY)


def test_probe_on_a_cpu_image_runs_nothing(tmp_path):
    smi = fake_smi(tmp_path, "exit 0")
    found = gpu.probe(smi=str(smi), **guest_tree(tmp_path, driver=False))
    assert found == {"state": "none", "why": "this image has no GPU driver"}
    assert not (tmp_path / "smi-args").exists()


def test_probe_without_a_card_says_what_loading_said(tmp_path):
    smi = fake_smi(tmp_path, "exit 0")
    log = "no NVIDIA display or 3D controller on the PCI bus: the driver was not loaded\n"  # gpu-init's
    found = gpu.probe(smi=str(smi), **guest_tree(tmp_path, loaded=False, card=False, log=log))
    assert found == {"state": "none", "why": "no GPU: no NVIDIA display or 3D controller on the PCI bus: the driver "
                                             "was not loaded"}
    # Had the driver been tried (an older gpu-init, or a card it did not see), its words are quoted.
    (tmp_path / "gpu.log").write_text("insmod extra/nvidia/nvidia.ko: exit 19: insmod: can't insert 'nvidia.ko': "
                                      "No such device\n[    5.5] NVRM: No NVIDIA GPU found.\n")
    found = gpu.probe(smi=str(smi), **guest_tree(tmp_path / "again", loaded=False, card=False,
                                                 log=(tmp_path / "gpu.log").read_text()))
    assert found == {"state": "none", "why": "no GPU: insmod extra/nvidia/nvidia.ko: exit 19: insmod: can't insert "
                                             "'nvidia.ko': No such device; [ 5.5] NVRM: No NVIDIA GPU found."}
    assert not (tmp_path / "smi-args").exists()


def test_probe_of_a_card_the_driver_did_not_take_is_a_failure(tmp_path):
    found = gpu.probe(smi=str(fake_smi(tmp_path, "exit 0")),
                      **guest_tree(tmp_path, loaded=False, log="insmod extra/nvidia/nvidia.ko: exit 1: Invalid "
                                                                   "module format\n"))
    assert found["state"] == "failed" and "did not load" in found["why"] and "Invalid module format" in found["why"]


def test_probe_of_a_failing_card_quotes_nvidia_smi_and_the_kernel(tmp_path):
    smi = fake_smi(tmp_path, 'echo "Unable to determine the device handle for GPU0000:01:00.0: Unknown Error"\n'
                             "exit 255")
    kmsg = ("6,1000,5000,-;NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.216.03\n"
            "6,1001,5001,-;something else entirely\n"
            "3,1002,9000,-;NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x22:0x56:742)\n")
    found = gpu.probe(smi=str(smi), **guest_tree(tmp_path, kmsg=kmsg))
    assert found["state"] == "failed"
    assert found["why"] == ("nvidia-smi exited with status 255: Unable to determine the device handle for "
                            "GPU0000:01:00.0: Unknown Error; NVRM: loading NVIDIA UNIX x86_64 Kernel Module "
                            "535.216.03; NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x22:0x56:742)")


def test_probe_bounds_a_hanging_or_flooding_nvidia_smi(tmp_path):
    tree = guest_tree(tmp_path)
    hung = gpu.probe(smi=str(fake_smi(tmp_path, "exec sleep 30")), timeout=0.5, **tree)
    assert hung == {"state": "failed", "why": "nvidia-smi did not answer within 0.5 s"}
    flood = gpu.probe(smi=str(fake_smi(tmp_path, "yes NVRM-flood | head -c 1000000; exit 1")), **tree)
    assert flood["state"] == "failed" and len(flood["why"]) <= gpu.WHY_CHARS
    missing = gpu.probe(smi=str(tmp_path / "no-such-smi"), **tree)
    assert missing["state"] == "failed" and "could not run" in missing["why"]


def test_kernel_lines_reads_dev_kmsg_without_blocking():
    """The real /dev/kmsg (the suite runs as root, as the image build needs): a line written to the
    kernel's log is found, and the read ends at the log's end (EAGAIN) instead of waiting there."""
    marker = f"vmjudge-test-{os.getpid()}-{time.monotonic_ns()}"
    with open("/dev/kmsg", "w") as kmsg:
        kmsg.write(f"{marker}\n")
    assert gpu.kernel_lines("/dev/kmsg", match=marker) == [marker]


# --- the agent's hello and its refusal --------------------------------------------------------

GREET = """
import json, os, sys
sys.path.insert(0, sys.argv[1])
import agent
from channel import Channel
fd = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
job, found = json.loads(sys.argv[3]), json.loads(sys.argv[4])
go = agent.greet(Channel(fd), job, found)
print(json.dumps(go))
"""


def greet(tmp_path: Path, job: dict, found: dict) -> tuple[bool, list[tuple[str, dict]]]:
    """agent.greet as the guest runs it (its files alone, -I -S), its frames decoded as the host does."""
    guest = tmp_path / "guest"
    guest.mkdir(exist_ok=True)
    for name in build.GUEST_FILES:
        shutil.copyfile(GUEST / name, guest / name)
    out = tmp_path / "frames"
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", GREET, str(guest), str(out), json.dumps(job),
                           json.dumps(found)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    decoded = frames.Decoder().feed(out.read_bytes())
    return json.loads(proc.stdout), [(f.kind, f.json()) for f in decoded]


def test_hello_carries_the_gpu(tmp_path):
    found = {"state": "none", "why": "this image has no GPU driver"}
    go, sent = greet(tmp_path, {"nonce": "n1"}, found)
    assert go is True and [k for k, _ in sent] == ["hello"]
    assert sent[0][1]["gpu"] == found and sent[0][1]["agent"] == build.agent_version()


def test_a_gpu_stage_without_a_working_gpu_runs_nothing(tmp_path):
    found = {"state": "none", "why": "no GPU: insmod extra/nvidia/nvidia.ko: exit 1: No such device"}
    go, sent = greet(tmp_path, {"nonce": "n1", "gpu": True}, found)
    assert go is False
    assert sent[0][1].pop("cpu") == read_cpu()  # the guest's CPU (#41): here, this machine's, read the same way
    assert sent == [("hello", {"nonce": "n1", "agent": build.agent_version(), "protocol": frames.PROTOCOL,
                               "gpu": found, "warm": False}),
                    ("error", {"message": "the GPU passed to this VM did not work: no GPU: insmod "
                                          "extra/nvidia/nvidia.ko: exit 1: No such device", "fault": "gpu"})]
    ok = {"state": "ok", "name": "Tesla T4", "memory_mib": 15360, "driver": "535.216.03", "line": "x"}
    assert greet(tmp_path, {"nonce": "n1", "gpu": True}, ok)[0] is True
    # A CPU stage on a GPU image without a GPU carries on.
    assert greet(tmp_path, {"nonce": "n1"}, found)[0] is True
