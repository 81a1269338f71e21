"""The GPU as the agent reports it in its hello frame, before any entry command runs.

gpu-init (run by init) loaded the driver and wrote what loading said to LOAD_LOG; this reads
that and asks nvidia-smi for the card. A CPU image (no GPU_LIST) costs one stat. Every path
is an argument, so the host's tests can point the probe at a fake tree and a fake nvidia-smi.
"""

import os
import subprocess

GPU_LIST = "/opt/vmjudge/gpu-modules.list"  # written by the image build when the image has a driver
LOAD_LOG = "/run/vmjudge-gpu.log"
QUERY = ("--query-gpu=name,memory.total,driver_version", "--format=csv,noheader,nounits")
SMI_TIMEOUT = 30
OUTPUT_BYTES = 4096  # of nvidia-smi's output, read
WHY_CHARS = 1500  # of a reason, sent
KERNEL_LINES = 12
NVIDIA = "0x10de"


def probe(gpu_list=GPU_LIST, load_log=LOAD_LOG, sys_dir="/sys", smi="nvidia-smi", kmsg="/dev/kmsg",
          timeout=SMI_TIMEOUT):
    """{"state": "ok", name, memory_mib, driver, line} | {"state": "none" | "failed", "why"}."""
    if not os.path.exists(gpu_list):
        return {"state": "none", "why": "this image has no GPU driver"}
    loading = "; ".join(_read(load_log).splitlines()) or "gpu-init left no log"
    if not os.path.isdir(os.path.join(sys_dir, "module", "nvidia")):
        if not nvidia_devices(sys_dir):
            return {"state": "none", "why": _bound("no GPU: " + loading)}
        return {"state": "failed", "why": _bound("the nvidia module did not load for the NVIDIA card here: " + loading)}
    try:
        proc = subprocess.run([smi, *QUERY], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=timeout)
        said, code = proc.stdout[:OUTPUT_BYTES].decode("utf-8", "replace").strip(), proc.returncode
    except subprocess.TimeoutExpired:
        said, code = f"nvidia-smi did not answer within {timeout} s", None
    except OSError as exc:
        said, code = f"nvidia-smi could not run: {exc}", None
    line = said.splitlines()[0].strip() if said else ""
    parts = [p.strip() for p in line.split(",")]
    if code == 0 and len(parts) == 3 and parts[1].isdigit():
        return {"state": "ok", "name": parts[0], "memory_mib": int(parts[1]), "driver": parts[2], "line": line}
    if code is not None:
        said = f"nvidia-smi exited with status {code}: {said or 'no output'}"
    return {"state": "failed", "why": _bound("; ".join([said, *kernel_lines(kmsg)]))}


def nvidia_devices(sys_dir):
    """PCI addresses of NVIDIA display controllers (class 0x03....), whether or not a driver took them."""
    base = os.path.join(sys_dir, "bus", "pci", "devices")
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return []
    return [name for name in names if _read(os.path.join(base, name, "vendor")) == NVIDIA
            and _read(os.path.join(base, name, "class")).startswith("0x03")]


def kernel_lines(kmsg, match="NVRM", keep=KERNEL_LINES):
    """The kernel's last lines naming the driver (RmInitAdapter failed, a missing firmware file):
    /dev/kmsg gives a record a read and EAGAIN at its end, so it never blocks."""
    try:
        fd = os.open(kmsg, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return []
    chunks: list[bytes] = []
    size = 0
    try:
        while size < (1 << 20):
            try:
                record = os.read(fd, 8192)
            except BrokenPipeError:  # records overwritten while reading: carry on with the next
                continue
            except OSError:  # EAGAIN: no more records
                break
            if not record:
                break
            chunks.append(record)
            size += len(record)
    finally:
        os.close(fd)
    lines = []
    for line in b"".join(chunks).decode("utf-8", "replace").splitlines():
        text = line.split(";", 1)[1] if ";" in line else line  # "level,seq,usec,flags;text"
        if match in text:
            lines.append(text.strip())
    return lines[-keep:]


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read(OUTPUT_BYTES).decode("utf-8", "replace").strip()
    except OSError:
        return ""


def _bound(text):
    text = " ".join(text.split())  # one line: the host shows it in a sentence
    return text if len(text) <= WHY_CHARS else text[:WHY_CHARS - 1] + "…"
