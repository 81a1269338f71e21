"""Every benchmark under bench/ starts: `python bench/X.py --help` from the repository, as a
developer runs it, exits 0 with its usage. Run as its own process, because that is where a
script's directory comes first on sys.path (a bench/queue.py once hid the standard library's
`queue` from every script there), and with the host's lock held by this test, so a benchmark
that takes the host before parsing its options fails here (--help must never wait for VMs).

And every benchmark runs: `python bench/X.py --smoke`, its smallest inputs through the same code,
prints its JSON, exits 0 (each checks its own invariants and exits 1 when one fails) and leaves
nothing behind. Nothing else runs the benchmarks, and one that no test runs rots unseen (the soak
stopped at its first submission for weeks). Their figures are not looked at: a smoke run on a
machine busy with the suite says nothing of speed. The benchmarks that boot VMs are VM tests
(the session's host, `site`); the others need no host."""

from __future__ import annotations

import importlib.util
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from pathlib import Path

import pytest

from vmjudge.config.site import profile_line
from vmjudge.queue.db import Queue

from .host_lock import LOCK_ENV, exclusive_host

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = {p.name: 'if __name__ == "__main__":' in p.read_text() for p in (REPO / "bench").glob("*.py")}
BENCHMARKS = sorted(name for name, runs in SCRIPTS.items() if runs)
# The benchmarks that boot VMs; every other one runs on the host alone.
BOOTS_VMS = ("boot.py", "case_overhead.py", "container.py", "cpu_matmul.py", "data_scale.py", "demo_under_load.py",
             "fairness.py",
             "gpu_image.py", "hostile_memory.py", "octave.py", "qemu_memory.py", "records.py", "score_container.py",
             "soak.py", "submission.py", "timing_spread.py")
HOST_ONLY = sorted(set(BENCHMARKS) - set(BOOTS_VMS))
SPEED = ("upload_within_2x", "page_p99_within_2x")  # web_abuse's figures, which a smoke run does not hold it to

# What each smoke run's JSON must show beyond its exit status: the invariants the benchmark is about.
INVARIANTS: dict[str, Callable[[dict], bool]] = {
    "queue_bench.py": lambda d: d["every_stage_claimed_once"] and d["stages"] == 200
    and all({"100", "200"} <= set(d["ready"][b]) and "leaderboard_participants" in d["listing"][b]
            for b in ("sqlite", "postgresql")) and d["listing"]["entries"] == 300,
    "rescore.py": lambda d: d["same_numbers_twice"] and d["entries"] == 20,
    "image_key.py": lambda d: d["same_key"] and d["rewrite_noticed"] and d["files_read_with_known_hashes"] == 0
    and d["mib"] == 4,
    "web.py": lambda d: d["upload"]["uploads"] == 2 and d["pages"]["entries_in_queue"] == 300,
    "web_abuse.py": lambda d: all(ok for name, ok in d["checks"].items() if name not in SPEED),
    "container.py": lambda d: d["stage1"]["all_passed"] and d["same_image_twice"]["roots_made"] == 1
    and d["same_image_twice"]["second_reused"] is True and len(d["stage1"]["archive_seconds"]) == 1
    and d["image"]["payload_bytes"] == 2 << 20,
    "boot.py": lambda d: d["boot"]["runs"] == 1 and d["warm"]["runs"] == 1 and d["channel"]["payload_mib"] == 1
    and d["channel"]["one_pipe_hop_over_direct"] > 0 and len(d["boot"]["cold_steps_s"]) == 8
    and 0 < sum(d["boot"]["cold_steps_s"].values()) < d["boot"]["median_vmjudge_s"],
    "case_overhead.py": lambda d: d["cases"] == 4 and d["failures"] == []
    and all(len(d[k]["each_case_s"]) == 4 and d[k]["per_case_s"]["min"] > 0 for k in ("container", "baseline")),
    "cpu_matmul.py": lambda d: (d["default"]["level"], d["qemu64"]["level"]) == ("x86-64-v3", "x86-64-v1")
    and d["default"]["avx2"] and not d["qemu64"]["avx2"] and d["matmul_ratio_qemu64_over_default"] > 0,
    # Data disks: each made once for its runs, and the host's scratch while a stage runs the same with 8 MiB
    # a record as with 64 KiB; the CD's grows with the data.
    "data_scale.py": lambda d: all(s["disks_made"] == 1 for k, s in d["stages"].items() if k.startswith("disk/"))
    and abs(scratch(d, "disk", "test", "large") - scratch(d, "disk", "test", "small")) < 1 << 20  # smoke: the exam
    and scratch(d, "cd", "test", "large") > scratch(d, "cd", "test", "small") + (15 << 20)
    and d["read"]["data_disk"]["mb_s"] > 0,
    "demo_under_load.py": lambda d: d["met"] and d["entries"] == 1 and d["hogs"] == 1,
    "fairness.py": lambda d: d["met"],
    "gpu_image.py": lambda d: d["guest"]["cpu_image"]["hello_gpu"]["state"] == "none",
    "hostile_memory.py": lambda d: [r["records"] for r in d["runs"]] == [2],
    "octave.py": lambda d: d["judge"]["base"]["scores"]["score"] == 1.0,
    "qemu_memory.py": lambda d: [r["memory_mib"] for r in d["runs"]] == [384] and d["rest_within_margin"]
    and d["every_qemu_bounded_and_within"],
    "records.py": lambda d: d["per_record"]["records"] > 0 and d["throughput"]["entries"] == 1,
    "score_container.py": lambda d: [(r["cases"], r["failures"]) for r in d["runs"]] == [(3, [])]
    and d["runs"][0]["container_s"] > d["runs"][0]["host_s"] > 0,
    "soak.py": lambda d: d["same_outcomes"] and d["all_done"] and not d["leftover_domains"]
    and not d["leftover_run_dirs"] and all(d["refused_and_nothing_queued"].values())
    and [k["killed"] for k in d["kills"]] == [True],
    # A submission's run over the whole set: its submission.csv sent back and matching the format, its time
    # measured by the host and by the guest itself; the host's format check of 1000 rows.
    "submission.py": lambda d: len(d["whole_set"]["run_s"]) == len(d["whole_set"]["direct_s"]) == 1
    and d["whole_set"]["ratio"] > 0 and d["format_check"]["rows"] == 1000,
    "timing_spread.py": lambda d: set(d["modes"]) == {"pinned_1_slot", "pinned_2_slots_busy"},
}


def scratch(d: dict, mode: str, subset: str, size: str) -> int:
    """data_scale.py's largest scratch bytes of a stage's runs."""
    return max(r["scratch_bytes"] for r in d["stages"][f"{mode}/{subset}/{size}"]["runs"])


def test_every_file_but_the_shared_helpers_is_a_benchmark():
    """So that a benchmark that lost its entry point is not left out of the tests below unseen."""
    assert sorted(name for name, runs in SCRIPTS.items() if not runs) == ["image_bench.py"]
    assert "rescore.py" in BENCHMARKS and "queue_bench.py" in BENCHMARKS
    assert sorted(INVARIANTS) == BENCHMARKS  # a new benchmark says what its smoke run must show


@pytest.mark.parametrize("script", BENCHMARKS)
def test_help_starts_without_the_host(script, tmp_path, monkeypatch):
    monkeypatch.setenv(LOCK_ENV, str(tmp_path / "host.lock"))  # this test's own lock, which the child also reads
    with exclusive_host("the benchmark test"):
        proc = subprocess.run([sys.executable, f"bench/{script}", "--help"], cwd=REPO, capture_output=True,
                              text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"usage: {script} "), proc.stdout
    assert "--smoke" in proc.stdout


def smoke(script: str, *args: str, env: dict[str, str] | None = None) -> dict:
    """`python bench/SCRIPT --smoke ARGS` as a developer runs it; its JSON, which its invariants must hold.
    `env`: what the run's environment adds to this process's."""
    proc = subprocess.run([sys.executable, f"bench/{script}", "--smoke", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})
    assert proc.returncode == 0, f"bench/{script} --smoke exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    if script in BOOTS_VMS:  # under TCG on purpose: the trial profile, which they say first
        assert proc.stderr.splitlines()[0] == profile_line(script), proc.stderr[:2000]
    doc = json.loads(proc.stdout)
    assert INVARIANTS[script](doc), json.dumps(doc, indent=1)[-4000:]
    return doc


@pytest.mark.parametrize("script", HOST_ONLY)
def test_smoke_on_the_host(script, tmp_path):
    """Their files go to a directory of the test's, which must be empty afterwards."""
    smoke(script, "--home" if script == "rescore.py" else "--dir", str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == []


# The VM benchmarks' smoke runs go two at a time, as #42 gave them three minutes and one at a time they took
# six: each is a process of its own, on a home of its own under the test home, with a lock of its own, and
# their figures are not looked at. Those that look at the whole host run alone, after: soak.py and
# qemu_memory.py count every vmj- domain or qemu on it, and demo_under_load.py and timing_spread.py are
# about what load does to a run's time.
ALONE = ("soak.py", "qemu_memory.py", "demo_under_load.py", "timing_spread.py")
LANES = 2
LONGEST = ("data_scale.py", "fairness.py", "hostile_memory.py", "boot.py")  # first, so that the lanes end together


@pytest.fixture(scope="module")
def vm_smokes(site, conn, image, tmp_path_factory) -> dict[str, BaseException | None]:
    """Each VM benchmark's smoke run: None when it passed, else what it raised. Afterwards (and in
    nothing_left_behind) no vmj- domain, no run directory and no home a benchmark made is left;
    fairness.py makes its home beside its --base."""
    before = set(site.home.iterdir()), set(site.home.parent.glob("fairness-*"))

    def run(script: str) -> BaseException | None:
        lock = tmp_path_factory.mktemp(f"lock-{script.removesuffix('.py')}") / "host.lock"
        try:
            smoke(script, "--base" if script == "fairness.py" else "--home", str(site.home),
                  env={LOCK_ENV: str(lock)})
        except Exception as exc:  # noqa: BLE001 - each benchmark's own test reports it
            return exc
        return None

    shared = sorted((s for s in BOOTS_VMS if s not in ALONE), key=lambda s: s not in LONGEST)
    with ThreadPoolExecutor(LANES) as lanes:
        done = dict(zip(shared, lanes.map(run, shared), strict=True))
    done.update({script: run(script) for script in ALONE})
    assert (set(site.home.iterdir()), set(site.home.parent.glob("fairness-*"))) == before
    return done


@pytest.mark.parametrize("script", BOOTS_VMS)
def test_smoke_in_vms(script, vm_smokes):
    """On the test home (its image, built before any test starts); the session holds the host, so each
    benchmark takes a lock of its own."""
    if vm_smokes[script] is not None:
        raise vm_smokes[script]


def test_fairness_reads_an_overtaking_from_the_commit_order(tmp_path):
    """fairness.py's verdict comes from the queue's events in id (commit) order, not from clocks: a
    batch claim after a participant's stage became ready and before its claim is found; one just
    before it became ready, or after its claim, is not. The events are written into a real queue."""
    spec = importlib.util.spec_from_file_location("fairness_bench", REPO / "bench" / "fairness.py")
    assert spec is not None and spec.loader is not None
    fairness = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fairness)
    db = tmp_path / "queue.db"
    Queue(db)  # its schema

    def found(*events: tuple[int, str]) -> list[dict]:
        with closing(sqlite3.connect(db)) as con, con:
            con.execute("DELETE FROM events")
            con.executemany("INSERT INTO events (entry_id, at, kind, detail) VALUES (?, '', ?, '')", events)
        return fairness.overtakings(db, {1})

    rerun = [(1, "submitted"), (1, "running"), (1, "done"), (1, "rerun")]
    assert found(*rerun, (2, "submitted"), (1, "running"), (2, "running")) == [
        {"batch_claim_event": 6, "entry": 1, "ready_participants": [2]}]
    assert found(*rerun, (2, "submitted"), (2, "running"), (1, "running"), (2, "stage"), (2, "running")) == []
    assert found(*rerun, (2, "submitted"), (2, "running"), (2, "stage"), (1, "running"))[0]["ready_participants"] == [2]
    assert found(*rerun, (2, "submitted"), (2, "running"), (2, "infra"), (1, "running")) == []
    assert found((1, "submitted"), (2, "submitted"), (1, "running")) == []  # entry 1 is a participant's until its rerun
