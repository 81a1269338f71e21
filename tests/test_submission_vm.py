"""DrivenData's code execution in real VMs (#60): examples/drivendata-style judged by the daemon, each
sample submission.zip to its verdict. The benchmark main.py is DrivenData's own, unmodified
(drivendataorg/youth-mental-health-runtime, example_submission/main.py); the good submissions score what
the host computes from their rows; format errors are the entry's, named in the quiz (the sample) and said
by kind and counts alone in the silent exam; the data is read-only where DrivenData puts it; the VM has
no network."""

from __future__ import annotations

import csv
import hashlib
import json
import shutil
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from vmjudge.config import load_challenge
from vmjudge.vm import domain

from .host_lock import linked_home
from .published import wait_until_published
from .replica_console import Console, json_line
from .test_pipeline import EXAMPLES, vmjudge
from .test_replica import BOOT_TIMEOUT, CHECK_TIMEOUT, daemon_stage_messages, guide_qemu_command

EXAMPLE = EXAMPLES / "drivendata-style"
BENCHMARK_SHA256 = "f8bf136d83791ae7b6bb157e47cdea69f24490476e70446a5e2f5542ea7fecc0"  # DrivenData's, at 6a98614
# case -> (outcome, failed stage, reason)
CASES = {
    "benchmark": ("scored", None, None),
    "keywords": ("scored", None, None),
    "writes-outside": ("scored", None, None),
    "dryrun": ("dry-run", None, None),
    "smoke": ("dry-run", None, None),  # the benchmark sent as a smoke test (`submit --smoke`)
    "wrong-columns": ("failed", "quiz", "quiz-format"),
    "missing-ids": ("failed", "quiz", "quiz-format"),
    "nan-values": ("failed", "quiz", "quiz-format"),
    "over-time": ("failed", "quiz", "quiz-timeout"),
    "network": ("failed", "quiz", "quiz-error"),
}


def submission_zip(entry: Path, out: Path) -> Path:
    """As DrivenData's `make pack-submission` packs it: `cd submission_src; zip -r ../submission.zip ./*`."""
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(entry.rglob("*")):
            zf.write(path, str(path.relative_to(entry)))
    return out


def host_score(rows: dict[str, dict[str, int]]) -> float:
    """DrivenData's average_f1 computed here from the labels and the rows, apart from the judge's code."""
    with open(EXAMPLE / "reference" / "test_labels.csv", newline="") as f:
        labels = {r["uid"]: r for r in csv.DictReader(f)}
    cats = ("InjuryLocationType", "WeaponType1")
    binary = [c for c in next(iter(labels.values())) if c not in ("uid", *cats)]
    f1s = []
    for c in binary:
        tp = sum(1 for u in labels if labels[u][c] == "1" and rows[u][c] == 1)
        fp = sum(1 for u in labels if labels[u][c] != "1" and rows[u][c] == 1)
        fn = sum(1 for u in labels if labels[u][c] == "1" and rows[u][c] != 1)
        f1s.append(2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0)
    accs = [sum(1 for u in labels if int(labels[u][c]) == rows[u][c]) / len(labels) for c in cats]
    return (sum(f1s) + sum(accs)) / (len(binary) + 2)


def benchmark_rows(ids) -> dict[str, dict[str, int]]:
    """What the benchmark predicts: 1 for every binary variable, 6 and 11 for the categorical ones."""
    header = (EXAMPLE / "test" / "submission_format.csv").read_text().splitlines()[0].split(",")[1:]
    return {u: {c: {"InjuryLocationType": 6, "WeaponType1": 11}.get(c, 1) for c in header} for u in ids}


class Judged:
    def __init__(self, home: Path, ids: dict[str, int]):
        self.home, self.ids = home, ids

    def __call__(self, case: str, organiser: bool = False) -> dict:
        args = ["show", str(self.ids[case]), "--json"] + (["--organiser"] if organiser else [])
        return json.loads(vmjudge(self.home, *args).stdout)


@pytest.fixture(scope="module")
def judged(site, image, conn):
    home = linked_home(site.home, "submission-")
    vmjudge(home, "challenge", "add", str(EXAMPLE))
    archives = home / "archives"
    archives.mkdir()
    ids = {}
    for case in sorted(CASES, key=lambda c: c != "over-time"):  # the longest first, beside the others
        folder = EXAMPLE / "entries" / ("benchmark" if case == "smoke" else case)
        path = submission_zip(folder, archives / f"{case}-submission.zip")
        smoke = ["--smoke"] if case == "smoke" else []
        ids[case] = int(vmjudge(home, "submit", "drivendata-style", str(path), "--owner", case, *smoke).stdout)
    # A zip of the folder rather than its files: refused at upload, nothing stored (stage 1 would refuse it too).
    folder = vmjudge(home, "submit", "drivendata-style", str(submission_zip(EXAMPLE / "entries" / "no-main",
                                                                          archives / "no-main-submission.zip")),
                     "--owner", "no-main", check=False)
    assert folder.returncode == 1 and "Your files are inside the folder submission_src/" in folder.stderr, folder.stderr
    vmjudge(home, "daemon", "--slots", "2", "--until-idle")
    wait_until_published(home)
    yield Judged(home, ids)
    assert domain.leftover_domains(conn) == []
    shutil.rmtree(home)


def test_the_benchmark_is_drivendatas_own_main_py_unmodified():
    assert hashlib.sha256((EXAMPLE / "entries" / "benchmark" / "main.py").read_bytes()).hexdigest() == \
        BENCHMARK_SHA256


@pytest.mark.parametrize("case", CASES)
def test_each_submission_gets_its_verdict(judged, case):
    doc = judged(case)
    outcome, failed_stage, reason = CASES[case]
    assert (doc["state"], doc["outcome"], doc["failed_stage"], doc["reason"]) == \
        ("done", outcome, failed_stage, reason), doc["report"]
    report = doc["report"]
    said = {
        "wrong-columns": "submission.csv's header lacks WeaponType1",
        "missing-ids": "submission.csv lacks 2 of the format's 8 ids: s006, s007.",
        "nan-values": "submission.csv has missing values (empty or NaN) in column HistoryMentalIllnessTreatmnt for "
                      "1 id: s001.",
        "over-time": "python3 main.py did not finish within 45 s on the sample",
        "network": "Network is unreachable",
        "writes-outside": "refused data/submission_format.csv: Read-only file system",
        "benchmark": "Saving predictions of shape (8, 23) to submission.csv",  # the quiz's log
        "smoke": "Smoke test completed with no error: it ran on the public sample only and is not scored.",
    }
    if case in said:
        assert said[case] in report, report
    if case in ("smoke", "dryrun"):  # the whole log, and never a score or a place on a board
        assert "Saving predictions of shape (8, 23) to submission.csv" in report and doc["scores"] == {}


def test_the_good_submissions_score_what_the_host_computes(judged):
    ids = load_challenge(EXAMPLE).test
    benchmark = judged("benchmark")
    assert benchmark["exam"] == {"records": len(ids), "completed": len(ids), "failed": 0, "timed_out": 0}
    assert benchmark["scores"]["score"] == pytest.approx(host_score(benchmark_rows(ids)))
    keywords = judged("keywords")["scores"]["score"]
    assert keywords > benchmark["scores"]["score"] + 0.3  # it reads the narratives


def test_nothing_was_written_outside_the_submissions_own_directory(judged):
    report = judged("writes-outside")["report"]
    for target in ("data/submission_format.csv", "data/planted.txt", "/etc/planted", "/planted", "/usr/lib/planted"):
        assert f"refused {target}" in report and f"WROTE {target}" not in report


def test_the_exam_says_nothing_of_what_the_entry_printed(judged):
    doc = judged("benchmark")
    assert "Saving predictions of shape (24, 23)" not in doc["report"]  # the exam's log is the organiser's


def test_the_replicas_local_test_gives_the_judges_format_check_and_log(judged):
    """DrivenData's `make test-submission`, here the replica's `vmjudge-replica check SUBMISSION.zip`: the
    judge's prep and quiz on the sample, the same verdicts and messages, the same log."""
    home = judged.home
    with booted_replica(home, "drivendata-style") as console:
        for case in ("benchmark", "nan-values", "dryrun"):
            output, status = console.run(f"vmjudge-replica check --json /media/vda1/{case}-submission.zip",
                                         CHECK_TIMEOUT)
            replica = json_line(output)
            judge = daemon_stage_messages(home, judged.ids[case])
            assert replica["stages"] == {k: v for k, v in judge.items() if k in ("prep", "quiz")}, case
            assert status == (1 if CASES[case][0] == "failed" else 0), case
        # A folder is packed as DrivenData's `make pack-submission` would.
        output, status = console.run("mkdir -p /tmp/mine && cp /media/vda1/benchmark-submission.zip /tmp/ && "
                                     "cd /tmp/mine && python3 -m zipfile -e ../benchmark-submission.zip . && "
                                     "vmjudge-replica check --json /tmp/mine", CHECK_TIMEOUT)
        replica = json_line(output)
        assert replica["archive"] == "mine-submission.zip" and status == 0, output[-2000:]
        assert replica["stages"]["quiz"] == daemon_stage_messages(home, judged.ids["benchmark"])["quiz"]


@contextmanager
def booted_replica(home: Path, challenge: str) -> Iterator[Console]:
    """The challenge's replica ISO, built and booted as the guide says, with home/archives as the participant's
    drive, mounted (`vmjudge-replica media`); its console."""
    iso = home / "replica.iso"
    vmjudge(home, "replica", "build", challenge, "-o", str(iso))
    argv = [str(iso) if a == "replica.iso" else a.replace("fat:ro:entries", f"fat:ro:{home / 'archives'}")
            for a in guide_qemu_command()]
    console = Console(argv + ["-accel", "tcg", "-display", "none"])
    try:
        console.expect(r"replica# ", BOOT_TIMEOUT)
        assert console.run("vmjudge-replica media", 120)[1] == 0
        yield console
    finally:
        console.close()


def test_the_board_ranks_the_scored_submissions_and_no_smoke_test(judged):
    rows = json.loads(vmjudge(judged.home, "leaderboard", "drivendata-style", "--json").stdout)
    assert [r["owner"] for r in rows][:1] == ["keywords"]
    assert {r["owner"] for r in rows} == {"keywords", "benchmark", "writes-outside"}
