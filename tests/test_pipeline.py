"""End to end: the three example challenges, their sample entries, through the command line.

`challenge add`, `submit` and one `daemon --slots 2 --until-idle` over all of them, with
real VMs; then each case is checked through `show --json`. The good entries' scores are
compared with a replay of the same entry on the host (the entries are deterministic).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from datetime import datetime
from pathlib import Path

import pycdlib
import pytest

from vmjudge.config import load_challenge
from vmjudge.images.build_step import tree_hash
from vmjudge.images.image import GuestImage
from vmjudge.queue.results import ExamResults, decode
from vmjudge.replica.build import replica_files
from vmjudge.replica.check import info as replica_info
from vmjudge.scorers.loader import load_scorer
from vmjudge.stages.answers import parse_answer_lines
from vmjudge.supervisor.daemon import DaemonLock
from vmjudge.vm import domain

from .cli import run_cli
from .example_cases import CASES, REFUSED_AT_UPLOAD
from .published import wait_until_published
from .sigstat_build import build_sigstat

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"

EXAMPLE_NAMES = ("beats2014", "af2017", "alarms2015")
# The cases run in VMs. af2017 (answer lines) runs every case but the two that alarms2015, also
# answer lines, runs on its own image (which the challenge's build script made); beats2014
# (result files) the cases whose stages differ with the results' style (missing-file is refused at
# upload, before any stage: REFUSED_AT_UPLOAD). A stage's limits and
# setup.sh work alike for all (and tests/test_examples.py runs every entry of all three on the
# host). Fewer VMs: CI time.
VM_CASES = {
    "beats2014": ("good", "quiz-mismatch", "dryrun", "exam-errors"),
    "af2017": ("good", "quiz-timeout", "dryrun", "exam-errors", "exam-over-cap"),
    "alarms2015": ("good", "setup-error", "quiz-mismatch", "exam-errors"),
}
PAIRS = [(name, case) for name in EXAMPLE_NAMES for case in CASES if case in VM_CASES[name]]
# The entries are deterministic: these are their scores, pinned (exam-errors fails 2 test records).
SCORES = {
    ("beats2014", "good"): {"Se_gross": 1.0, "PPV_gross": 1.0, "Se_average": 1.0, "PPV_average": 1.0, "score": 1.0},
    ("beats2014", "exam-errors"): {"Se_gross": 36 / 55, "PPV_gross": 54 / 55, "Se_average": 2 / 3,
                                   "PPV_average": 2 / 3, "score": (36 / 55 + 54 / 55 + 2 / 3 + 2 / 3) / 4},
    ("af2017", "good"): {"F1_N": 1.0, "F1_A": 1.0, "F1_O": 1.0, "F1_noise": 1.0, "score": 1.0, "score_4class": 1.0},
    ("af2017", "exam-errors"): {"F1_N": 2 / 3, "F1_A": 2 / 3, "F1_O": 1.0, "F1_noise": 2 / 3, "score": 7 / 9,
                                "score_4class": 0.75},
    # exam-errors fails a202l, a true alarm (so a false negative), and b203l, a false one.
    ("alarms2015", "good"): {"TP": 4.0, "TN": 6.0, "FP": 0.0, "FN": 0.0, "score": 1.0},
    ("alarms2015", "exam-errors"): {"TP": 3.0, "TN": 6.0, "FP": 0.0, "FN": 1.0, "score": 9 / 14},
}


def vmjudge(home: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = run_cli(*args, home=home)
    if check and proc.returncode != 0:
        raise AssertionError(f"vmjudge {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def hash_of_reference(reference: Path) -> str:
    """The reference hash of reports (docs/participants.md), computed here rather than by the code under
    test: sha256 over each file's relative path, a NUL, its own sha256 in hex and a newline, in path order."""
    lines = b"".join(p.relative_to(reference).as_posix().encode() + b"\0"
                     + hashlib.sha256(p.read_bytes()).hexdigest().encode() + b"\n"
                     for p in sorted(reference.rglob("*")) if p.is_file())
    return hashlib.sha256(lines).hexdigest()


def archive(entry_dir: Path, out: Path) -> Path:
    with tarfile.open(out, "w:gz") as tar:
        for path in sorted(entry_dir.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(entry_dir)), recursive=False)
    return out


class Judged:
    def __init__(self, home: Path, ids: dict[tuple[str, str], int], archives: Path):
        self.home, self.ids, self.archives = home, ids, archives

    def show(self, example: str, case: str, organiser: bool = False) -> dict:
        args = ["show", str(self.ids[example, case]), "--json"] + (["--organiser"] if organiser else [])
        return json.loads(vmjudge(self.home, *args).stdout)


@pytest.fixture(scope="module")
def judged(site, image, conn):
    home = Path(tempfile.mkdtemp(prefix="pipeline-", dir=site.home))
    os.chmod(home, 0o711)
    (home / "images").symlink_to(site.layout.images)  # share the test image cache
    (home / "site.toml").write_text("[results]\nkeep_media = true\n")
    archives = home / "archives"
    archives.mkdir()
    for name in EXAMPLE_NAMES:
        vmjudge(home, "challenge", "add", str(EXAMPLES / name))
    ids, said = {}, {}
    # The daemon takes the oldest entry first: the longest runs (a 60 s exam, a quiz waiting out
    # its limit) go first, to run beside the others rather than alone at the end.
    for name, case in sorted(PAIRS, key=lambda pair: pair[1] not in ("exam-over-cap", "quiz-timeout")):
        path = archive(EXAMPLES / name / "entries" / case, archives / f"{name}-{case}-entry.tar.gz")
        proc = vmjudge(home, "submit", name, str(path), "--owner", case)
        ids[name, case], said[name, case] = int(proc.stdout), proc.stderr
    for name, (case, says) in ((n, c) for n in EXAMPLE_NAMES for c in REFUSED_AT_UPLOAD.items()):
        path = archive(EXAMPLES / name / "entries" / case, archives / f"{name}-{case}-entry.tar.gz")
        refused = vmjudge(home, "submit", name, str(path), "--owner", case, check=False)
        assert refused.returncode == 1 and says in refused.stderr, refused.stderr  # and nothing stored: below
    # The good af2017 entry once more, late: the same stages and answers, another board; its
    # next.sh sleeps after each answer as long as the label says (0 to 3 s), so its exam's
    # figures carry the test labels, which no participant-facing output may (#20).
    timing = archives / "af2017-timing"
    shutil.copytree(EXAMPLES / "af2017" / "entries" / "good", timing)
    with open(timing / "next.sh", "a") as f:
        f.write('case "$(tail -n 1 answers.txt | cut -d, -f2)" in\n'
                'N) ;; O) sleep 1 ;; A) sleep 2 ;; *) sleep 3 ;; esac\n')
    proc = vmjudge(home, "submit", "af2017", str(archive(timing, archives / "af2017-timing-entry.tar.gz")),
                   "--owner", "latecomer", "--late")
    ids["af2017", "late"] = int(proc.stdout)
    daemon = vmjudge(home, "daemon", "--slots", "2", "--until-idle")
    wait_until_published(home)  # what participants see of the exams, from its moment
    judged = Judged(home, ids, archives)
    judged.said = said
    judged.daemon_said = daemon.stderr
    yield judged
    assert domain.leftover_domains(conn) == []
    assert list((home / "run").iterdir()) == []
    shutil.rmtree(home)


def test_an_archive_refused_at_upload_is_never_an_entry(judged):
    """Stage 1's host checks run at upload (#58): the missing-file entries were refused there, and none
    is in the queue, holding a pending place."""
    for case in REFUSED_AT_UPLOAD:
        listed = json.loads(vmjudge(judged.home, "entries", "--owner", case, "--json").stdout)
        assert listed["total"] == 0, listed


@pytest.mark.parametrize("example, case", PAIRS)
def test_each_case_gets_its_verdict(judged, example, case):
    doc = judged.show(example, case)
    outcome, failed_stage, reason = CASES[case]
    assert (doc["state"], doc["outcome"], doc["failed_stage"], doc["reason"]) == \
        ("done", outcome, failed_stage, reason), doc["report"]
    n_test = len(load_challenge(EXAMPLES / example).test)
    if case in ("good", "exam-errors"):
        failed = 0 if case == "good" else 2
        assert doc["exam"] == {"records": n_test, "completed": n_test - failed, "failed": failed, "timed_out": 0}
        assert doc["scores"] == pytest.approx(SCORES[example, case])
    elif case == "exam-over-cap":
        # 14 s a record against the 60 s cap, well inside its own 40 s limit
        done = doc["exam"]["completed"] + doc["exam"]["failed"] + doc["exam"]["timed_out"]
        assert doc["exam"]["records"] == n_test and 0 < done < n_test
        assert doc["scores"] == {}
        assert (f"The exam exceeded its limit of 60 s after processing {done} of {n_test} test records "
                f"({100 * done / n_test:.0f} %). Entry not scored.") in doc["report"]
    else:
        assert doc["exam"] is None and doc["scores"] == {}
    if case == "dryrun":
        assert "Dry run completed with no error. Remove the DRYRUN file" in doc["report"]
    if case == "setup-error":
        assert "cannot build" in doc["report"]  # setup.sh's own output is shown
    if case == "quiz-mismatch":
        # Both sides of the first mismatch, of a training record; nothing of a test record.
        assert "output does not match submission" in doc["report"]
        if load_challenge(EXAMPLES / example).results.style == "files":
            assert re.search(r"submitted outputs/\S+\.qrs: \d+ bytes\n  produced \S+\.qrs: \d+ bytes\n"
                             r"  first difference at byte \d+:\n    submitted: [0-9a-f]{8}  .*\n"
                             r"    produced:  [0-9a-f]{8}  ", doc["report"]), doc["report"]
        else:
            assert re.search(r"submitted \(answers.txt\): \S+,\S*\n  produced \(answers.txt\): \S+,\S*",
                             doc["report"]), doc["report"]
        for record in load_challenge(EXAMPLES / example).test:
            assert f"next.sh {record}" not in doc["report"] and f"{record}.qrs" not in doc["report"]
            assert f"{record}," not in doc["report"]
    assert (judged.home / "results" / str(doc["id"]) / "report.html").is_file()


def test_the_daemon_said_each_stage_and_summed_up(judged):
    """Its stderr: a start and an end line for every stage it ran, each naming the entry and its
    owner, and the summary (#16)."""
    lines = judged.daemon_said.splitlines()
    for (example, case), entry_id in judged.ids.items():
        doc = judged.show(example, case) if case != "late" else None
        mine = [line for line in lines if f" entry {entry_id} (" in line]
        starts = [line for line in mine if ": started in slot " in line]
        assert starts and len(starts) == len([line for line in mine if " after " in line]), mine
        if doc is not None and doc["outcome"] == "failed":
            assert any(f"{doc['failed_stage']}: failed ({doc['reason']})" in line for line in mine), mine
    assert re.fullmatch(rf"\d\d:\d\d:\d\d {len(judged.ids)} entries ended \(.*\), \d+ stages run, in \d+ s",
                        lines[-1]), lines[-1]


@pytest.fixture(scope="module")
def host_path(tmp_path_factory) -> str:
    """PATH for replays on the host: the venv's python3 (numpy), and alarms2015's sigstat,
    built from the source its image is built from."""
    sigstat = build_sigstat(tmp_path_factory.mktemp("sigstat"))
    return f"{sigstat}:{Path(sys.executable).parent}:{os.environ['PATH']}"


def host_replay(example: str, case: str, records: tuple[str, ...], path: str | None = None) -> ExamResults:
    """Run the entry's next.sh on the host, as the guest does, for the test records. `path`:
    host_path's, which alarms2015 needs (sigstat); the others need only the venv's python3."""
    path = path or f"{Path(sys.executable).parent}:{os.environ['PATH']}"
    ch = load_challenge(EXAMPLES / example)
    answers, files = {}, {}
    for record in records:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            shutil.copytree(EXAMPLES / example / "entries" / case, work, dirs_exist_ok=True)
            if ch.results.style == "answer-lines":
                (work / "answers.txt").unlink()  # the judge sets the submitted answers aside
            for f in ch.record_files("test", record):
                (work / f.name).symlink_to(f)
            proc = subprocess.run(["sh", "./next.sh", record], cwd=work, capture_output=True,
                                  env={**os.environ, "PATH": path},
                                  timeout=300)
            ok = proc.returncode == 0
            if ch.results.style == "files":
                out = work / ch.results.output_name(record)
                files[record] = out.read_bytes() if ok and out.exists() else None
            else:
                got = (work / "answers.txt").read_bytes() if (work / "answers.txt").exists() else None
                answers[record] = parse_answer_lines(got).get(record) if ok else None
    if ch.results.style == "files":
        return ExamResults(records=records, files=files)
    return ExamResults(records=records, answers=answers)


@pytest.mark.parametrize("example", EXAMPLE_NAMES)
@pytest.mark.parametrize("case", ["good", "exam-errors"])
def test_scores_equal_a_replay_of_the_entry_on_the_host(judged, host_path, example, case):
    ch = load_challenge(EXAMPLES / example)
    expected = load_scorer(ch.scorer)(host_replay(example, case, ch.test, host_path), ch.reference_dir)
    assert judged.show(example, case)["scores"] == pytest.approx(expected)


def test_good_entries_outscore_their_failing_records(judged):
    for example in EXAMPLE_NAMES:
        good = judged.show(example, "good")["scores"]["score"]
        assert good == 1.0
        assert judged.show(example, "exam-errors")["scores"]["score"] < good


def test_no_reference_file_is_on_any_iso(judged):
    forbidden_names, forbidden_hashes = set(), set()
    for name in EXAMPLE_NAMES:
        for f in (EXAMPLES / name / "reference").rglob("*"):
            if f.is_file():
                forbidden_names.add(f.name)
                forbidden_hashes.add(hashlib.sha256(f.read_bytes()).hexdigest())
    # Only the fixture's entries: another test may have evaluated one more in this home.
    isos = sorted(iso for eid in judged.ids.values() for iso in judged.home.glob(f"results/{eid}/*.iso"))
    vm_stages = sum(1 for eid in judged.ids.values()
                    for a in judged_attempts(judged, eid) if a["stage"] != "score" and a["manifest"].get("domain"))
    assert len(isos) == vm_stages > 25
    disks = sorted((judged.home / "data-disks").glob("*.iso"))  # the record sets' disks (#57): ISOs too
    assert len(disks) >= 2 * len(EXAMPLE_NAMES)
    for path in isos + disks:
        # A kept CD is root's alone: libvirt leaves a read-only disk to its qemu user, which must not read a kept
        # exam CD. A data disk is root's, readable by qemu's group, which each VM's AppArmor profile confines.
        assert (path.stat().st_uid, path.stat().st_mode & 0o777) == (0, 0o600 if path in isos else 0o640), path
        iso = pycdlib.PyCdlib()
        iso.open(str(path))
        try:
            for root, _dirs, files in iso.walk(rr_path="/"):
                for fname in files:
                    assert fname not in forbidden_names, f"{fname} from reference/ is on {path}"
                    data = io.BytesIO()
                    iso.get_file_from_iso_fp(data, rr_path=f"{root.rstrip('/')}/{fname}")
                    assert hashlib.sha256(data.getvalue()).hexdigest() not in forbidden_hashes, \
                        f"{root}/{fname} on {path} has the content of a reference file"
        finally:
            iso.close()


def judged_attempts(judged, entry_id):
    doc = json.loads(vmjudge(judged.home, "show", str(entry_id), "--json", "--organiser").stdout)
    return doc["organiser"]["attempts"]


@pytest.mark.parametrize("example", EXAMPLE_NAMES)
def test_exam_output_never_reaches_the_participant(judged, example):
    participant = judged.show(example, "exam-errors")
    assert "SECRET-TEST-OUTPUT" not in json.dumps(participant)
    organiser = judged.show(example, "exam-errors", organiser=True)
    log = organiser["organiser"]["logs"]["exam.log"]
    assert "SECRET-TEST-OUTPUT" in log["text"] and log["bytes"] == Path(log["path"]).stat().st_size


def test_every_stage_run_has_a_manifest(judged):
    entry_id = judged.ids["beats2014", "good"]
    attempts = judged_attempts(judged, entry_id)
    assert [a["stage"] for a in attempts] == ["prep", "quiz", "exam", "score"]
    entry_sha256 = hashlib.sha256((judged.archives / "beats2014-good-entry.tar.gz").read_bytes()).hexdigest()
    image = judged.home / "images" / attempts[0]["manifest"]["image"]
    image_sha256 = {name: hashlib.sha256((image / name).read_bytes()).hexdigest()
                    for name in ("root.sqfs", "vmlinuz", "initrd.img")}
    for a in attempts[:3]:
        m = a["manifest"]
        assert (m["entry_sha256"], m["image_sha256"]) == (entry_sha256, image_sha256)
        assert len(m["iso_sha256"]) == 64 and m["ended"] == "bye"
        assert m["guest_agent"] == m["agent_version"] and m["host"]
        # #41: the guest's own CPU as it reported it, under the test site's default (TCG's max on qemu 7.2).
        guest = m["hardware"]["guest_cpu"]
        assert (guest["setting"], guest["level"]) == ("max", "x86-64-v3") and "avx2" in guest["flags"], guest
        # Timings: the boot is part of the run, and the run is part of the attempt the queue timed.
        attempt_seconds = (datetime.fromisoformat(a["finished_at"]) - datetime.fromisoformat(a["started_at"]))
        assert 0 < m["boot_seconds"] < m["run_seconds"] <= attempt_seconds.total_seconds() + 1
    assert attempts[3]["manifest"]["scorer_version"] == "beats2014/2"


def test_leaderboard_ranks_the_scored_entries(judged):
    rows = json.loads(vmjudge(judged.home, "leaderboard", "af2017", "--json").stdout)
    assert {r["owner"] for r in rows} == {"good", "exam-errors"}
    assert [r["rank"] for r in rows] == [1, 2] and rows[0]["score"] >= rows[1]["score"]


def test_a_late_entry_is_judged_alike_and_ranked_only_on_the_late_board(judged):
    late, good = judged.show("af2017", "late"), judged.show("af2017", "good")
    assert (late["late"], late["state"], late["outcome"]) == (True, "done", "scored")
    assert [a["stage"] for a in judged_attempts(judged, late["id"])] == ["prep", "quiz", "exam", "score"]
    assert late["scores"] == good["scores"] and late["exam"] == good["exam"]
    board = json.loads(vmjudge(judged.home, "leaderboard", "af2017", "--late", "--json").stdout)
    assert [(r["rank"], r["owner"], r["entry_id"]) for r in board] == [(1, "latecomer", late["id"])]
    official = json.loads(vmjudge(judged.home, "leaderboard", "af2017", "--json").stdout)
    assert "latecomer" not in {r["owner"] for r in official}


def test_submit_tells_each_owner_the_scored_entries_left(judged):
    assert judged.said["beats2014", "good"] == "4 scored entries remain for good\n"  # max_scored_per_owner = 5
    assert judged.said["beats2014", "dryrun"] == "a dry run does not count: 5 scored entries remain for dryrun\n"
    assert judged.said["af2017", "good"] == ""  # af2017 sets no limit


def test_evaluate_runs_one_entry_in_the_foreground(judged):
    path = judged.archives / "af2017-dryrun-entry.tar.gz"
    proc = vmjudge(judged.home, "evaluate", "af2017", str(path), check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "stage prep" in proc.stdout and "stage quiz" in proc.stdout and "stage exam" not in proc.stdout
    assert "Dry run completed" in proc.stdout


def test_a_second_daemon_is_refused(judged):
    lock = DaemonLock(judged.home)
    assert lock.acquire()
    try:
        proc = vmjudge(judged.home, "daemon", "--until-idle", check=False)
    finally:
        lock.release()
    assert proc.returncode == 1
    assert f"another vmjudge daemon (pid {os.getpid()}) is running" in proc.stderr


@pytest.mark.parametrize("name, content, words", [
    ("solution.zip", None, "Improper name (solution.zip) for entry"),
    ("x-entry.zip", b"this is not a zip file", "is not a readable zip archive"),
    ("x-entry.tar.gz", b"\x1f\x8b truncated", "is not a readable"),
])
def test_submit_refuses_unreadable_or_misnamed_archives(judged, tmp_path, name, content, words):
    path = tmp_path / name
    path.write_bytes(content if content is not None else (EXAMPLES / "af2017" / "challenge.toml").read_bytes())
    before = vmjudge(judged.home, "status", "--json").stdout
    spooled = sorted(judged.home.glob("spool/*/*"))
    proc = vmjudge(judged.home, "submit", "af2017", str(path), check=False)
    assert proc.returncode == 1 and words in proc.stderr and "Traceback" not in proc.stderr
    assert vmjudge(judged.home, "status", "--json").stdout == before
    assert sorted(judged.home.glob("spool/*/*")) == spooled


def test_submit_to_an_unknown_challenge_is_refused(judged):
    proc = vmjudge(judged.home, "submit", "nope", str(judged.archives / "af2017-good-entry.tar.gz"), check=False)
    assert proc.returncode == 1 and "no challenge named 'nope' is registered" in proc.stderr


@pytest.mark.parametrize("example", EXAMPLE_NAMES)
@pytest.mark.parametrize("case", ["good", "exam-errors"])
def test_exam_results_are_archived_and_scored_from_the_archive(judged, host_path, example, case):
    """Stage 3 stores its results content-addressed; stage 4 scored exactly those bytes."""
    ch = load_challenge(EXAMPLES / example)
    doc = judged.show(example, case, organiser=True)  # the hashes of what was scored are the organiser's
    # The first evaluation's (test_rescore_and_rerun_on_a_judged_home may add a second).
    exam, score = [a for a in judged_attempts(judged, doc["id"]) if a["stage"] in ("exam", "score")
                   and a["evaluation"] == 1]
    digest = exam["manifest"]["results_sha256"]
    blob = (judged.home / "archive" / "sha256" / digest).read_bytes()
    assert hashlib.sha256(blob).hexdigest() == digest
    archived = decode(blob)
    replay = host_replay(example, case, ch.test, host_path)
    assert archived.records == replay.records
    assert (archived.answers, archived.files) == (replay.answers, replay.files)
    assert score["manifest"]["results_sha256"] == digest
    official = doc["scorings"][0]
    assert (official["why"], official["results_sha256"], official["scores"]) == ("official", digest, doc["scores"])
    assert official["scorer_version"] == f"{ch.scorer}/2"  # the three are at version 2 (#21)
    assert official["reference_sha256"] == hash_of_reference(ch.reference_dir)


def test_rescore_and_rerun_on_a_judged_home(judged):
    """Re-scoring the real archive starts no VM and gives the same numbers; --rerun-stages
    puts an entry back through the daemon as a new evaluation, keeping its history."""
    entry_id = judged.ids["af2017", "good"]
    before = judged.show("af2017", "good", organiser=True)
    runs_before = len(judged_attempts(judged, entry_id))
    proc = vmjudge(judged.home, "rescore", "af2017", "--json")
    doc = json.loads(proc.stdout)
    rescored = {e["entry_id"]: e for e in doc["entries"]}
    assert doc["ok"] and set(rescored) == {judged.ids["af2017", c] for c in ("good", "exam-errors")}
    assert all(e["new"] == e["old"] for e in rescored.values())
    assert len(judged_attempts(judged, entry_id)) == runs_before  # no stage ran
    assert [s["why"] for s in judged.show("af2017", "good")["scorings"]] == ["official", "rescore"]

    proc = vmjudge(judged.home, "rescore", "af2017", "--rerun-stages", "--entries", str(entry_id))
    assert f"entry {entry_id} (good): queued again from stage 1" in proc.stdout
    vmjudge(judged.home, "daemon", "--until-idle")
    wait_until_published(judged.home)
    after = judged.show("af2017", "good", organiser=True)
    assert (after["state"], after["outcome"], after["evaluation"]) == ("done", "scored", 2)
    assert after["scores"] == before["scores"]
    assert [s["why"] for s in after["scorings"]] == ["official", "rescore", "official"]
    assert after["scorings"][2]["results_sha256"] == before["scorings"][0]["results_sha256"]  # deterministic
    attempts = judged_attempts(judged, entry_id)
    assert [(a["stage"], a["evaluation"]) for a in attempts] == \
        [(s, 1) for s in ("prep", "quiz", "exam", "score")] + [(s, 2) for s in ("prep", "quiz", "exam", "score")]
    assert "Re-scored" not in after["report"]  # the official scoring of evaluation 2 is the latest


def test_the_challenges_own_software_is_in_its_image_and_on_the_replica(judged, tmp_path):
    """#13: alarms2015's build script compiled sigstat from the challenge's image/ into the image
    its entries ran on (their next.sh calls it, and the good one scored 1.0 above); the manifest's
    build step names it, the build tree is not in the root, and the replica carries all of it."""
    source = EXAMPLES / "alarms2015" / "image"
    attempts = judged_attempts(judged, judged.ids["alarms2015", "good"])
    image = GuestImage.load(judged.home / "images" / attempts[0]["manifest"]["image"])
    build = image.manifest["build"]
    assert (build["script"], build["sha256"], build["tree_sha256"]) == \
        ("image/build.sh", hashlib.sha256((source / "build.sh").read_bytes()).hexdigest(), tree_hash(source))
    assert "/usr/local/bin/sigstat" in build["installed"] and build["seconds"] > 0
    assert image.manifest["recipe"]["build"] == "image/build.sh"
    listing = subprocess.run(["unsquashfs", "-l", "-d", "", str(image.root)], capture_output=True, text=True,
                             check=True, timeout=300).stdout.split()
    assert "/usr/local/bin/sigstat" in listing and "/usr/bin/gcc" in listing
    assert not [p for p in listing if p.startswith(("/run/vmjudge-build", "/tmp/"))]

    # What the replica ISO holds is replica_files' map (test_replica.py writes such ISOs and boots
    # them): laid out here as the booted replica sees it under /media/replica/vmjudge.
    files = replica_files(load_challenge(EXAMPLES / "alarms2015"), image)
    assert files["vmjudge/root.sqfs"] == image.root
    replica = tmp_path / "replica"
    for name in ("root.sqfs", "vmlinuz", "initrd.img", "manifest.json", "replica.json", "challenge/image/build.sh"):
        held = files[f"vmjudge/{name}"]
        (replica / name).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(held, bytes):
            (replica / name).write_bytes(held)
        else:
            (replica / name).symlink_to(held)
    info = replica_info(replica)  # what `vmjudge-replica info` prints in the booted replica
    assert info["build"] == build and info["sha256"] == image.manifest["sha256"]
    tool = subprocess.run(["unsquashfs", "-cat", str(replica / "root.sqfs"), "usr/local/bin/sigstat"],
                          capture_output=True, check=True, timeout=300).stdout
    assert tool.startswith(b"\x7fELF")
    assert (replica / "challenge/image/build.sh").read_bytes() == (source / "build.sh").read_bytes()


# The late entry's next.sh sleeps this long after each answer (see the fixture).
LABEL_SLEEP = {"N": 0, "O": 1, "A": 2, "~": 3}


def walk_numbers(doc) -> list[float]:
    if isinstance(doc, dict):
        return [n for v in doc.values() for n in walk_numbers(v)]
    if isinstance(doc, list):
        return [n for v in doc for n in walk_numbers(v)]
    return [doc] if isinstance(doc, (int, float)) and not isinstance(doc, bool) else []


def test_the_exam_reaches_participants_as_tenths_of_its_caps_only(judged):
    """An entry whose exam time per record follows the record's label: the organiser's figures
    show it, record by record; every participant-facing output (show, show --json, the HTML
    report, both leaderboards as text, JSON, CSV and HTML) names no test record and gives of
    the exam only its time and peak memory in whole tenths of their caps."""
    ch = load_challenge(EXAMPLES / "af2017")
    labels = dict(line.split(",") for line in (EXAMPLES / "af2017" / "reference" / "REFERENCE.csv").read_text().split())
    entry_id = judged.ids["af2017", "late"]
    organiser = judged.show("af2017", "late", organiser=True)
    exam = [a for a in organiser["organiser"]["attempts"] if a["stage"] == "exam" and a["status"] == "passed"][-1]
    figures = exam["figures"]
    rows = {r["name"]: r for r in figures["commands"]}
    assert set(rows) == set(ch.test) and all(r["status"] == "ok" for r in rows.values())
    # The channel is real: the organiser sees each record's time follow its label.
    seconds = {label: [rows[r]["seconds"] for r in ch.test if labels[r] == label] for label in LABEL_SLEEP}
    assert min(seconds["~"]) > max(seconds["N"]) + 1.5, seconds
    assert figures["stage_seconds"] > sum(LABEL_SLEEP[labels[r]] for r in ch.test)
    assert any(line.startswith(f"  {r}: ok ") for r in ch.test for line in organiser["organiser"]["figures"])

    home = judged.home
    doc = judged.show("af2017", "late")
    text = vmjudge(home, "show", str(entry_id)).stdout
    html = (home / "results" / str(entry_id) / "report.html").read_text()
    boards = []
    for late in ([], ["--late"]):
        boards.append(vmjudge(home, "leaderboard", "af2017", *late).stdout)
        boards.append(vmjudge(home, "leaderboard", "af2017", *late, "--json").stdout)
        for kind in ("csv", "html"):
            out = home / f"board{len(boards)}.{kind}"
            vmjudge(home, "leaderboard", "af2017", *late, f"--{kind}", str(out))
            boards.append(out.read_text())
    for output in (text, json.dumps(doc), html, *boards):
        for record in ch.test:
            assert record not in output
    assert doc["figures"]["exam"] == {"time_tenths": doc["figures"]["exam"]["time_tenths"], "time_cap_seconds": 60.0,
                                      "memory_tenths": doc["figures"]["exam"]["memory_tenths"],
                                      "memory_cap": doc["figures"]["exam"]["memory_cap"]}
    assert all(isinstance(doc["figures"]["exam"][k], int) and 1 <= doc["figures"]["exam"][k] <= 10
               for k in ("time_tenths", "memory_tenths"))
    exam_section = text.split("Stage 3 (exam): ", 1)[1].split("\n\n", 1)[0]
    assert re.fullmatch(r"8 test records: 8 completed, 0 failed, 0 timed out\.\n"
                        r"Resources \(the exam gives tenths of its caps only\): time (10|[1-9])/10 of the 60 s cap; "
                        r"peak memory (10|[1-9])/10 of the VM's \d+\.\d [GM]iB\.", exam_section), exam_section
    # No exact exam figure anywhere else in the participant's document (the quiz's and prep's
    # figures are of the participant's own training files, and may be exact).
    # (Measurements only: a count such as 1 process or 0 OOM kills is not told apart from the
    # exam's own counts, and a time that happens to be a whole number of seconds is skipped.)
    exact = {v for v in (figures["stage_seconds"], figures["vm"]["wall_seconds"], figures["vm"]["cpu_seconds"],
                         figures["home_used"], *(r[k] for r in rows.values()
                                                 for k in ("seconds", "cpu_seconds", "peak_memory")))
             if v is not None and v != int(v) or (v or 0) > 100_000} - {figures["memory_limit"]}
    rest = {k: v for k, v in doc.items() if k != "figures"}
    assert len(exact) > 10 and not exact & set(walk_numbers(rest) + walk_numbers(doc["figures"]["exam"])), exact
    # The quiz, on the participant's own files, is told in full beside its limits.
    quiz = doc["figures"]["quiz"]
    assert [r["record"] for r in quiz["records"]] == list(ch.training)
    per_record, quiz_total = ch.limits.per_record, ch.limits.quiz_total
    assert quiz["command_limit"] == per_record and quiz["stage_limit"] == quiz_total and len(quiz["slowest"]) == 5
    assert re.search(rf"Resources: slowest training record A\d{{4}}: \d+\.\d s of {re.escape(f'{per_record:.1f}')} s; "
                     rf"the quiz took \d+\.\d s of {re.escape(f'{quiz_total:.1f}')} s; "
                     r"peak memory \d+\.\d MiB of \d+\.\d [GM]iB \(A\d{4}\); home disk \d+\.\d [KMG]iB of "
                     rf"\d+\.\d [GM]iB used; {len(ch.training)} of {len(ch.training)} training cases sampled over "
                     rf"time, the busiest A\d{{4}} using \d\.\d\d of {ch.vm.vcpus} vCPU\(s\) on average\.\n"
                     r"Slowest records: A\d{4} ", text), text
