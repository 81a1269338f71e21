"""The guest's CPU in real VMs (#41), two VM runs in all: one job under the test site's default
(TCG's "max") and the same job under `cpu = "qemu64"` (qemu's old default, booted cold: no warm
state is made for it). Each job reads the guest's own /proc/cpuinfo as the entry sees it and runs
one AVX2 instruction (tests/avx2_probe.py), so each boot serves every check:

- the flags the agent reports in its hello are the guest's, and the manifest's hardware keeps them
  with their level; under the default they are a superset of qemu64's and hold what this qemu
  emulates (AVX, AVX2, FMA: qemu 7.2) but ERMS, under qemu64 they are qemu64's;
- the AVX2 instruction runs under the default and, under qemu64, ends its own command with SIGILL
  while the run itself ends normally (the agent's bye): the entry's failure, never the judge's.

The whole pipeline's verdict for such an entry under the default is the hostile corpus's case
"avx2-setup" (scored), and a site the host cannot give is refused before any VM in
test_cpu_gate.py.
"""

from __future__ import annotations

from dataclasses import replace

from vmjudge.config.cpu import LEVEL_FLAGS
from vmjudge.vm.job import Command, Job

from .avx2_probe import AVX2_OK
from .avx2_probe import SHELL as AVX2_SHELL
from .conftest import output

SIGILL = 4
JOB = Job(commands=(Command("flags", ("sh", "-c", "grep -m1 '^flags' /proc/cpuinfo"), 20.0),
                    Command("avx2", ("sh", "-c", AVX2_SHELL), 30.0)))


def seen_flags(run) -> set[str]:
    return set(output(run, 0).split(":", 1)[1].split())


def test_the_guests_flags_under_max_and_qemu64_are_recorded_and_avx2_runs_only_under_max(boot, site):
    default = boot(JOB)
    old = boot(JOB, site=replace(site, cpu="qemu64", warm_start=False))
    for run in (default, old):
        assert run.ended == "bye" and run.transcript.agent_error is None
        hello_flags = set(run.transcript.hello["cpu"]["flags"])
        assert hello_flags == seen_flags(run)  # the agent reports what the entry sees
        assert run.hardware["guest_cpu"]["flags"] == sorted(hello_flags)  # and the manifest keeps it
    max_flags, qemu64_flags = seen_flags(default), seen_flags(old)
    assert default.hardware["guest_cpu"]["setting"] == "max" and old.hardware["guest_cpu"]["setting"] == "qemu64"
    # Under TCG the default is a superset of qemu64 and holds what qemu 7.2 emulates.
    assert qemu64_flags <= max_flags, sorted(qemu64_flags - max_flags)
    assert {"avx", "avx2", "fma", "f16c", "bmi1", "bmi2", "movbe"} <= max_flags
    # but not "fast" rep movsb/stosb, which TCG runs a byte per iteration (guest_cpu.TCG_SLOW).
    assert not {"erms", "fsrm"} & max_flags, sorted(max_flags)
    assert default.hardware["guest_cpu"]["level"] == "x86-64-v3" and not LEVEL_FLAGS["x86-64-v4"] <= max_flags
    # qemu64: the 2003 baseline, none of SSSE3 to AVX2.
    assert not {"ssse3", "sse4_1", "sse4_2", "avx", "avx2", "fma"} & qemu64_flags
    assert old.hardware["guest_cpu"]["level"] == "x86-64-v1"
    # The AVX2 instruction: runs under the default; SIGILL under qemu64, the command's own end.
    ran, killed = default.transcript.commands[1], old.transcript.commands[1]
    assert ran.status == "ok" and AVX2_OK in output(default, 1)
    assert killed.status != "ok" and killed.exit_code in (-SIGILL, 128 + SIGILL), (killed.status, killed.exit_code)
    assert AVX2_OK not in output(old, 1)
