"""The guest's CPU as the guest reports it (#41), and where the host puts it: the agent's cpu.py
reads a saved /proc/cpuinfo, the host keeps a bounded, checked copy of the hello's report with
its x86-64 level in the manifest's hardware, and `show`, `show --json` (through the participant
allow-list) and the organiser's board print it. The VM side is tests/test_guest_cpu_vm.py."""

from __future__ import annotations

import json

from vmjudge.images.guest.cpu import read_cpu
from vmjudge.queue.db import Queue
from vmjudge.vm.hardware import MAX_FLAGS, below_level, guest_cpu, line

from . import test_hardware
from .cli import run_cli
from .test_hardware import scored_entry

# The head of /proc/cpuinfo in a guest of qemu 7.2's TCG with -cpu max (two vCPUs; the second cut short).
CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: QEMU TCG CPU version 2.5+
flags\t\t: fpu de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 syscall \
nx mmxext pdpe1gb rdtscp lm 3dnowext 3dnow rep_good nopl cpuid extd_apicid pni pclmulqdq ssse3 fma cx16 sse4_1 \
sse4_2 movbe popcnt aes xsave avx f16c rdrand hypervisor lahf_lm svm abm sse4a 3dnowprefetch vmmcall fsgsbase bmi1 \
avx2 smep bmi2 erms mpx adx smap clflushopt clwb xsaveopt xgetbv1 arat npt vgif umip pku ospke vaes la57
bogomips\t: 5600.00

processor\t: 1
model name\t: something else
flags\t\t: fpu
"""


def test_the_agent_reads_the_first_processors_model_and_flags(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text(CPUINFO)
    found = read_cpu(str(info))
    assert found["model"] == "QEMU TCG CPU version 2.5+"
    assert found["flags"][:3] == ["fpu", "de", "pse"] and "avx2" in found["flags"] and "la57" in found["flags"]
    assert read_cpu(str(tmp_path / "missing")) == {"model": None, "flags": []}


def test_the_host_keeps_a_checked_bounded_copy_with_its_level(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text(CPUINFO)
    kept = guest_cpu("max", {"cpu": read_cpu(str(info))})
    assert (kept["setting"], kept["model"], kept["level"]) == ("max", "QEMU TCG CPU version 2.5+", "x86-64-v3")
    assert kept["flags"] == sorted(kept["flags"]) and {"avx", "avx2", "fma"} <= set(kept["flags"])
    # What a guest sends is not trusted: odd names dropped, the list and the model cut to bounds.
    odd = guest_cpu("qemu64", {"cpu": {"model": "x" * 10_000, "flags": ["sse2", "<b>", 7, "A B", *["f"] * 10,
                                                                         *[f"x{i}" for i in range(10 * MAX_FLAGS)]]}})
    assert len(odd["model"]) == 120 and "<b>" not in odd["flags"] and 7 not in odd["flags"]
    assert len(odd["flags"]) < MAX_FLAGS and odd["level"] is None
    # An agent before 1.8 sent no report: the setting alone, and the line says so.
    assert guest_cpu("max", {"agent": "1.6"}) == {"setting": "max"}
    assert guest_cpu("max", {"cpu": "avx2"}) == {"setting": "max"}
    assert guest_cpu("max", None) == {"setting": "max"}


GUEST = {"setting": "max", "model": "QEMU TCG CPU version 2.5+", "flags": ["avx", "avx2", "fma"], "level": "x86-64-v3"}
HARDWARE = {"host": "judge7", "cpu": "Xeon", "host_cores": 8, "kernel": "6.1.0", "qemu": "7.2.0", "libvirt": "9.0.0",
            "vcpus": 1, "memory_mib": 384, "accel": "tcg", "gpu": None, "guest_cpu": GUEST}


def test_show_and_the_organisers_board_print_the_guests_cpu(tmp_path, monkeypatch):
    monkeypatch.setattr(test_hardware, "HARDWARE", HARDWARE)  # the fingerprint scored_entry records for each stage
    queue = Queue(tmp_path / "queue.db")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "challenge.toml").write_text('name = "c"\n')
    queue.add_challenge("c", tmp_path / "c", "key")
    eid = scored_entry(queue, "ann", tmp_path / "x.zip")
    said = line(HARDWARE)
    assert said.endswith('under tcg; guest CPU x86-64-v3 (QEMU TCG CPU version 2.5+, cpu = "max")')
    assert said in run_cli("show", str(eid), home=tmp_path).stdout
    shown = json.loads(run_cli("show", str(eid), "--json", home=tmp_path).stdout)
    assert shown["hardware"]["guest_cpu"] == GUEST  # participants see what their entry could use
    board = run_cli("leaderboard", "c", "--organiser", home=tmp_path).stdout
    assert f"entry {eid} (ann) exam: {said}" in board.splitlines()
    assert "exam:" not in run_cli("leaderboard", "c", home=tmp_path).stdout
    older = {k: v for k, v in HARDWARE.items() if k != "guest_cpu"}
    assert "guest CPU" not in line(older)
    assert line({**older, "guest_cpu": {"setting": "max"}}).endswith('guest CPU not reported (cpu = "max")')


def test_a_guest_below_the_challenges_level_is_the_infrastructures_failure_not_the_entrys(tmp_path):
    """VmRunner raises InfrastructureError("guest-cpu", this) after such a run: the gate trusted libvirt's word."""
    info = tmp_path / "cpuinfo"
    info.write_text(CPUINFO)
    v3 = guest_cpu("max", {"cpu": read_cpu(str(info))})
    assert below_level(v3, "x86-64-v3") is None and below_level(v3, "x86-64-v1") is None
    said = below_level(v3, "x86-64-v4")
    assert said == ("the guest's CPU is x86-64-v3, below the challenge's cpu_level x86-64-v4 (it lacks avx512f, "
                    "avx512bw, avx512cd, avx512dq, avx512vl), although libvirt said cpu = \"max\" would reach it")
    assert below_level({"setting": "max"}, "x86-64-v4") is None  # an agent before 1.8 reported nothing
    assert below_level(None, "x86-64-v4") is None
