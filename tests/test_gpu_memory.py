"""GPU memory in a GPU stage's samples over time (#55): the guest reads the card's memory in use through
NVML (images/guest/gpu_memory.py) with ctypes, in its own process. No GPU is lent to this project's
machines, so NVML here is a fake built from C with the real library's signatures (nvmlInit_v2,
nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetMemoryInfo and its nvmlMemory_t of three unsigned long
longs): a binding with a wrong argument or field type reads a wrong number or fails. Run on the
guest's own Python (/usr/bin/python3, isolated, no site), as the agent runs."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from vmjudge.images import build

GUEST_PYTHON = "/usr/bin/python3"
TOTAL = 16_106_127_360  # a T4's 15 GiB

FAKE_NVML = r"""
#include <stdio.h>
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
#define HANDLE ((void *)0x7ead0000beefULL)  /* a handle above 32 bits: a binding that truncates it fails */
static int initialised;
int nvmlInit_v2(void) { initialised = 1; return INIT_RESULT; }
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **device) {
    if (!initialised || index != 0) return 2;
    *device = HANDLE;
    return 0;
}
int nvmlDeviceGetMemoryInfo(void *device, nvmlMemory_t *memory) {
    unsigned long long used;
    FILE *f;
    int ok;
    if (device != HANDLE) return 2;
    f = fopen(USED_FILE, "r");
    if (!f) return 999;  /* NVML_ERROR_UNKNOWN: the card stopped answering */
    ok = fscanf(f, "%llu", &used) == 1;
    fclose(f);
    if (!ok) return 999;
    memory->total = TOTAL;
    memory->used = used;
    memory->free = TOTAL - used;
    return 0;
}
"""

PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import gpu_memory, samples
meter = gpu_memory.open_meter(sys.argv[2])
out = {"opened": meter is not None}
if meter is not None:
    out["used"] = meter.used()
    with open(sys.argv[3], "w") as f:
        f.write("5368709120")
    out["used_later"] = meter.used()
    series = samples.Series(samples.with_gpu(lambda: (0.5, 1000), meter))
    series.tick(0.0)
    with open(sys.argv[3], "w") as f:
        f.write("not a number")
    series.tick(0.6)  # NVML fails: the sample keeps CPU and memory
    series.end(0.8)
    out["rows"] = series.rows()
print(json.dumps(out))
"""


def fake_nvml(tmp_path: Path, init_result: int = 0) -> tuple[Path, Path]:
    """The fake library (its init returning `init_result`) and the file it reads the bytes in use from."""
    used = tmp_path / "used"
    used.write_text("1073741824")
    source = tmp_path / "nvml.c"
    source.write_text(FAKE_NVML)
    library = tmp_path / "libnvidia-ml.so.1"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", f"-DINIT_RESULT={init_result}", f'-DUSED_FILE="{used}"',
                    f"-DTOTAL={TOTAL}ULL", "-o", str(library), str(source)], check=True, capture_output=True)
    return library, used


def probe(library: Path, used: Path) -> dict:
    proc = subprocess.run([GUEST_PYTHON, "-I", "-S", "-c", PROBE, str(build.GUEST_DIR), str(library), str(used)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_the_guest_reads_the_cards_memory_in_use_through_nvml_on_its_own_python(tmp_path):
    library, used = fake_nvml(tmp_path)
    found = probe(library, used)
    assert found["opened"] and found["used"] == 1 << 30 and found["used_later"] == 5 << 30
    # The series: the GPU's figure fourth where NVML answered, left out where it did not.
    assert found["rows"] == [[0.0, 0.5, 1000, 5 << 30], [0.6, 0.5, 1000], [0.8, 0.5, 1000]]


@pytest.mark.parametrize("init_result", [1, 999])
def test_nvml_that_does_not_start_leaves_no_meter(tmp_path, init_result):
    library, used = fake_nvml(tmp_path, init_result)
    assert probe(library, used) == {"opened": False}


def test_no_library_or_one_without_nvmls_functions_leaves_no_meter(tmp_path):
    assert probe(tmp_path / "absent.so", tmp_path / "used") == {"opened": False}
    other = tmp_path / "libother.so"
    (tmp_path / "other.c").write_text("int something(void) { return 0; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(other), str(tmp_path / "other.c")], check=True)
    assert probe(other, tmp_path / "used") == {"opened": False}


def test_the_agent_opens_the_meter_on_a_gpu_stage_only():
    """The job loop asks for the meter when the job says "gpu": true (greet has found the card working),
    and hands it to every command; ctypes is imported on that path alone."""
    agent = (build.GUEST_DIR / "agent.py").read_text()
    assert 'if job.get("gpu") is True:  # the card was found working (greet): its memory sampled' in agent
    assert "run_command(channel, index, Command(spec, heartbeat), gpu_view, meter)" in agent
    assert "import ctypes" not in (build.GUEST_DIR / "samples.py").read_text()
    assert "gpu_memory.py" in build.GUEST_FILES
