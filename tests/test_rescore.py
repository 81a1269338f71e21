"""Re-scoring from archived stage-3 results, on a real queue database, without VMs.

Fifty af2017 entries are judged up to stage 3 through the queue, their results written
through the results store as the exam stage does, and scored by the real stage 4. Then
`vmjudge rescore` runs (as a command, with libvirt unreachable and no qemu on PATH, so
any attempt to start a VM would fail) with a changed scorer and with a corrected
reference: every new score is checked against a computation made here from the answers.
"""

from __future__ import annotations

import csv
import hashlib
import json
import random
import shutil
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import wfdb

from vmjudge.config import Site, load_challenge, load_site
from vmjudge.errors import ArchiveError
from vmjudge.queue.db import Queue
from vmjudge.queue.results import ExamResults, encode, get, put, store_dir
from vmjudge.scorers import loader
from vmjudge.stages.context import StageOutcome
from vmjudge.supervisor.attempts import Recorder
from vmjudge.supervisor.evaluate import conclude, run_stage
from vmjudge.supervisor.slots import Slot

from .cli import run_cli
from .scorers_v1 import af2017 as af2017_v1
from .scorers_v1 import beats2014 as beats2014_v1
from .test_pipeline import EXAMPLES, hash_of_reference, host_replay

REPO = Path(__file__).resolve().parent.parent
AF2017 = REPO / "examples" / "af2017"
RECORDS = tuple((AF2017 / "test" / "RECORDS").read_text().split())
LABELS = dict(line.split(",") for line in (AF2017 / "reference" / "REFERENCE.csv").read_text().split())
CLASSES = ("N", "A", "O", "~")
NO_VM_ENV = {  # libvirt unreachable, no qemu-img or qemu-system on PATH
    "VMJUDGE_URI": "qemu+unix:///system?socket=/nonexistent/libvirt-sock",
    "PATH": str(Path(sys.executable).parent),
}

STRICT_SCORER = '''
def score(results, reference):
    """Exact-match accuracy: the "fixed" scorer of the tests."""
    labels = dict(line.split(",") for line in (reference / "REFERENCE.csv").read_text().split())
    right = sum(1 for r in results.records if results.answers.get(r) == labels[r])
    return {"score": right / len(results.records), "right": float(right)}
'''


def f1_mean(answers: dict[str, str | None], labels: dict[str, str]) -> float:
    """af2017's official score, computed here from scratch: mean F1 of N, A and O."""
    given = {r: (a or "~") for r, a in answers.items()}  # no answer (or an empty one) counts as ~
    f1 = []
    for c in ("N", "A", "O"):
        correct = sum(1 for r in answers if given[r] == c and labels[r] == c)
        total = sum(1 for r in answers if labels[r] == c) + sum(1 for r in answers if given[r] == c)
        f1.append(2 * correct / total if total else 0.0)
    return sum(f1) / 3


def accuracy(answers: dict[str, str | None], labels: dict[str, str]) -> float:
    return sum(1 for r in answers if answers[r] == labels[r]) / len(answers)


@dataclass
class Home:
    site: Site
    queue: Queue
    answers: dict[int, dict[str, str | None]]  # entry id -> what it answered per test record

    def vmjudge(self, *args: str, check: bool | None = True) -> subprocess.CompletedProcess:
        proc = run_cli(*args, home=self.site.home, env=NO_VM_ENV)
        if check is not None and (proc.returncode == 0) != check:
            raise AssertionError(f"vmjudge {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
        return proc

    def show(self, entry_id: int, organiser: bool = True) -> dict:
        return json.loads(self.vmjudge("show", str(entry_id), "--json", *(["--organiser"] if organiser else [])).stdout)

    def stage_runs(self) -> int:
        with sqlite3.connect(self.queue.database.path) as db:
            return db.execute("SELECT COUNT(*) FROM stage_runs").fetchone()[0]


def judge_from_archive(home: Home, owner: str, late: bool, answers: dict[str, str | None]) -> int:
    """An af2017 entry taken through the queue's four stages (see judge_results)."""
    entry_id = judge_results(home, "af2017", owner, ExamResults(records=RECORDS, answers=answers), late,
                             name=f"{owner}-{len(home.answers)}")
    home.answers[entry_id] = answers
    return entry_id


def judge_results(home: Home, challenge: str, owner: str, results: ExamResults, late: bool = False,
                  name: str | None = None, scored_on: Home | None = None) -> int:
    """An entry taken through the queue's four stages: prep and quiz recorded as passed, the
    exam's `results` archived as the exam stage archives them and its outcome concluded as the
    daemon concludes it (evaluate.conclude: on a shared queue, the results into its database),
    and stage 4 run for real, here or by the host `scored_on` (another home on the same queue)."""
    site, queue = home.site, home.queue
    spooled = site.home / "spool" / f"{name or challenge + '-' + owner}-entry.tar.gz"
    spooled.parent.mkdir(exist_ok=True)
    spooled.write_bytes(spooled.name.encode())
    entry_id = queue.add_entry(challenge, owner, late, hashlib.sha256(spooled.read_bytes()).hexdigest(),
                               spooled.name, spooled)
    for stage in ("prep", "quiz"):
        queue.claim_next(only=entry_id)
        run = queue.start_stage(entry_id, stage, 0)
        queue.finish_stage(run, "passed", "ok", {"stage": stage}, next_stage={"prep": "quiz", "quiz": "exam"}[stage])
    queue.claim_next(only=entry_id)
    run = queue.start_stage(entry_id, "exam", 0)
    got = results.files if results.files is not None else results.answers
    statuses = {r: ("ok" if got.get(r) is not None else "error") for r in results.records}
    style = "files" if results.files is not None else "answer-lines"
    digest = put(site.home, encode(results.records, statuses, style, answers=results.answers, files=results.files))
    completed = sum(s == "ok" for s in statuses.values())
    conclude(queue, site, run, StageOutcome("passed", "exam done", exam={
        "records": len(results.records), "completed": completed, "failed": len(results.records) - completed,
        "timed_out": 0}, manifest={"stage": "exam", "results_sha256": digest}, results_sha256=digest), Recorder(None))
    scorer = scored_on or home
    run_stage(scorer.queue, scorer.site, scorer.queue.claim_next(only=entry_id), Slot(0))  # the real stage 4
    return entry_id


def make_home(root: Path, official: int = 50, late: int = 5) -> Home:
    home_dir = root / "home"
    home_dir.mkdir()
    site = load_site(home_dir)
    site.layout.ensure()
    queue = Queue(site.layout.queue_db)
    queue.add_challenge("af2017", AF2017, "key")
    home = Home(site, queue, {})
    for i in range(official + late):
        rng = random.Random(i)
        answers = {r: rng.choice(["N", "A", "O", "~", "", None]) for r in RECORDS}
        answers["B0002"] = "N"  # each entry gets one right, so no two scorers agree by both giving 0
        judge_from_archive(home, f"team{i % 17}", i >= official, answers)
    return home


@pytest.fixture(scope="module")
def judged_home(tmp_path_factory) -> Home:
    return make_home(tmp_path_factory.mktemp("rescore"))


@pytest.fixture
def home(judged_home, tmp_path) -> Home:
    """A fresh copy of the judged home for each test (its spool stays in the original)."""
    shutil.copytree(judged_home.site.home, tmp_path / "home")
    return Home(load_site(tmp_path / "home"), Queue(tmp_path / "home" / "queue.db"), dict(judged_home.answers))


def official_ids(home: Home) -> list[int]:
    return [e.id for e in home.queue.entries() if not e.late]


def test_the_official_scores_come_from_the_archive(home):
    for entry_id, answers in home.answers.items():
        entry = home.queue.entry(entry_id)
        assert (entry.state, entry.outcome) == ("done", "scored")
        assert entry.scores["score"] == pytest.approx(f1_mean(answers, LABELS))
        [official] = home.queue.scorings(entry_id)
        assert official.why == "official" and official.scorer_version == "af2017/2"
        assert official.results_sha256 == home.queue.exam_results(entry_id).sha256


def test_an_answer_the_official_scorer_refuses_fails_the_entry_at_stage_4(home):
    # af2017's official script stops at a label other than N, A, O, ~; [score] invalid_answers
    # is "refuse" by default, so such an entry gets no score, and the participant is told why.
    answers = dict.fromkeys(RECORDS, "N")
    answers[RECORDS[0]] = "AF"
    entry_id = judge_from_archive(home, "teamX", False, answers)
    entry = home.queue.entry(entry_id)
    assert (entry.state, entry.outcome, entry.failed_stage, entry.reason) == ("done", "failed", "score",
                                                                            "invalid-answer")
    assert home.queue.scorings(entry_id) == []
    report = home.show(entry_id)["report"]
    assert ("1 test record(s) have an answer the official af2017 scorer refuses; the official script gives no score "
            "for such an answer file, so this entry is not scored: make next.sh write only the allowed answers "
            "(stage 2 checks the training answers the same way). Entry not scored.") in report
    assert RECORDS[0] not in report and "AF" not in report.split("\n", 1)[1]  # the exam is silent
    [score_run] = [a for a in home.show(entry_id, organiser=True)["organiser"]["attempts"] if a["stage"] == "score"]
    assert score_run["manifest"]["refused_answer"] == f"the first: {RECORDS[0]},AF (not N, A, O or ~ (case matters))"


def test_a_changed_scorer_changes_every_score_and_keeps_the_old_ones(home, tmp_path):
    scorer = tmp_path / "strict.py"
    scorer.write_text(STRICT_SCORER)
    ids = official_ids(home)
    assert len(ids) == 50
    runs_before = home.stage_runs()
    doc = json.loads(home.vmjudge("rescore", "af2017", "--scorer", f"{scorer}:score", "--json").stdout)
    assert doc["ok"] and doc["done"] == 50 and doc["refused"] == 0
    assert doc["scorer_version"] == f"strict.py:score@{hashlib.sha256(scorer.read_bytes()).hexdigest()[:12]}"
    assert [e["entry_id"] for e in doc["entries"]] == ids  # the late ones are not in the default set
    for e in doc["entries"]:
        answers = home.answers[e["entry_id"]]
        assert e["old"]["score"] == pytest.approx(f1_mean(answers, LABELS))
        assert e["new"]["score"] == pytest.approx(accuracy(answers, LABELS))
        assert e["new"]["score"] != pytest.approx(e["old"]["score"])
        shown = home.show(e["entry_id"])
        assert shown["scores"] == e["new"]  # the current scores, which the leaderboard ranks
        assert [(s["why"], s["scorer_version"], s["scores"]) for s in shown["scorings"]] == \
            [("official", "af2017/2", e["old"]), ("rescore", doc["scorer_version"], e["new"])]
        assert shown["scorings"][0]["results_sha256"] == shown["scorings"][1]["results_sha256"]
        assert f"(was {e['old']['score']:.4f})" in shown["report"]
    # No VM: libvirt and qemu were out of reach, and no stage ran.
    assert home.stage_runs() == runs_before
    assert not list(home.site.home.glob("results/*/console-*"))

    again = json.loads(home.vmjudge("rescore", "af2017", "--scorer", f"{scorer}:score", "--json").stdout)
    assert [e["new"] for e in again["entries"]] == [e["new"] for e in doc["entries"]]
    assert [e["old"] for e in again["entries"]] == [e["new"] for e in doc["entries"]]
    assert [s["why"] for s in home.show(ids[0])["scorings"]] == ["official", "rescore", "rescore"]


def test_a_corrected_reference_changes_every_score(home, tmp_path):
    reference = tmp_path / "reference"
    shutil.copytree(AF2017 / "reference", reference)
    corrected = {**LABELS, "B0001": "N", "B0003": "A"}  # two labels fixed (no score stays the same)
    (reference / "REFERENCE.csv").write_text("".join(f"{r},{corrected[r]}\n" for r in RECORDS))
    proc = home.vmjudge("rescore", "af2017", "--reference", str(reference))
    lines = proc.stdout.splitlines()
    assert len(lines) == 51 and lines[-1].startswith("re-scored 50 of 50 chosen entries of af2017 (scorer af2017/2")
    for entry_id in official_ids(home):
        answers = home.answers[entry_id]
        old, new = f1_mean(answers, LABELS), f1_mean(answers, corrected)
        assert new != pytest.approx(old)
        assert f"entry {entry_id} (team" in proc.stdout and f"score {old:.4f} -> {new:.4f}" in proc.stdout
        shown = home.show(entry_id)
        assert shown["scores"]["score"] == pytest.approx(new)
        assert [s["reference_sha256"] for s in shown["scorings"]] == \
            [hash_of_reference(AF2017 / "reference"), hash_of_reference(reference)]
    assert hash_of_reference(reference) != hash_of_reference(AF2017 / "reference")


def test_late_and_all_choose_the_entries(home, tmp_path):
    late = [e.id for e in home.queue.entries() if e.late]
    doc = json.loads(home.vmjudge("rescore", "af2017", "--late", "--json").stdout)
    assert [e["entry_id"] for e in doc["entries"]] == late and all(e["late"] for e in doc["entries"])
    doc = json.loads(home.vmjudge("rescore", "af2017", "--all", "--json").stdout)
    assert len(doc["entries"]) == 55
    proc = home.vmjudge("rescore", "af2017", "--late", "--all", check=False)
    assert proc.returncode == 1 and "--late and --all cannot be used together" in proc.stderr


def test_entries_that_cannot_be_rescored_are_reported_and_fail_the_run(home, tmp_path):
    ids = official_ids(home)
    damaged, missing, unscored = ids[0], ids[1], ids[2]
    blob = store_dir(home.site.home) / home.queue.exam_results(damaged).sha256
    blob.write_bytes(blob.read_bytes().replace(b'"N"', b'"A"'))
    (store_dir(home.site.home) / home.queue.exam_results(missing).sha256).unlink()
    home.queue.add_challenge("other", tmp_path, "key")
    other = home.queue.add_entry("other", "zed", False, "ab" * 32, "z-entry.zip", tmp_path / "z")
    failed = home.queue.add_entry("af2017", "yan", False, "cd" * 32, "y-entry.zip", tmp_path / "y")
    run = home.queue.start_stage(home.queue.claim_next(only=failed).id, "prep", 0)
    home.queue.finish_stage(run, "failed", "Missing component(s): next.sh.", {}, reason="missing-component",
                            outcome="failed")
    home.queue.rerun(unscored)  # queued again: the daemon owns it now
    csv_path = tmp_path / "out.csv"
    entries = ",".join(str(i) for i in (damaged, missing, unscored, ids[3], other, failed, 9999))
    proc = home.vmjudge("rescore", "af2017", "--entries", entries, "--csv", str(csv_path), check=False)
    assert proc.returncode == 1, proc.stderr
    out = proc.stdout
    assert f"entry {damaged} (team0): not done: the archived results " in out and "are damaged" in out
    assert f"entry {missing} (team1): not done: the archived results" in out and "are missing" in out
    assert f"entry {unscored} (team2): not done: entry {unscored} is queued (stage prep): wait" in out
    assert f"entry {other} (zed): not done: entry {other} belongs to challenge other, not af2017" in out
    assert f"entry {failed} (yan): not done: entry {failed} has no archived stage-3 results (outcome failed)" in out
    assert "entry 9999: not done: there is no entry 9999" in out
    assert "re-scored 1 of 7 chosen entries of af2017" in out and "6 not done" in out
    rows = list(csv.DictReader(csv_path.open()))
    assert [(int(r["entry"]), r["status"]) for r in rows] == sorted(
        [(damaged, "refused"), (missing, "refused"), (unscored, "refused"), (ids[3], "rescored"), (other, "refused"),
         (failed, "refused"), (9999, "refused")])
    assert [s.why for s in home.queue.scorings(damaged)] == ["official"]  # a refused entry is left as it was
    # The default set reports a scored entry whose archive is gone, rather than skipping it.
    proc = home.vmjudge("rescore", "af2017", check=False)
    assert proc.returncode == 1 and f"entry {missing} (team1): not done" in proc.stdout


@pytest.mark.parametrize("args, words", [
    (["--scorer", "no such scorer"], "Unknown scorer 'no such scorer'"),
    (["--scorer", "vmjudge.scorers.loader:nothing"], "has no 'nothing'"),
    (["--scorer", "/nonexistent/fix.py:score"], "/nonexistent/fix.py cannot be read"),
    (["--scorer", "beats2014"], "The scorer beats2014 expects style files"),
])
def test_a_bad_scorer_is_refused_and_nothing_is_recorded(home, args, words):
    proc = home.vmjudge("rescore", "af2017", *args, check=False)
    assert proc.returncode == 1 and proc.stderr.startswith("vmjudge: ") and words in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert all(len(home.queue.scorings(i)) == 1 for i in home.answers)


def test_a_reference_missing_a_record_is_refused_and_nothing_is_recorded(home, tmp_path):
    reference = tmp_path / "reference"
    reference.mkdir()
    (reference / "REFERENCE.csv").write_text("".join(f"{r},{LABELS[r]}\n" for r in RECORDS[:-1]))
    proc = home.vmjudge("rescore", "af2017", "--reference", str(reference), check=False)
    assert proc.returncode == 1
    assert f"has no line for test record '{RECORDS[-1]}'" in proc.stderr and "nothing was recorded" in proc.stderr
    assert all(len(home.queue.scorings(i)) == 1 for i in home.answers)


def test_rerun_stages_queues_entries_again_and_keeps_their_history(home):
    ids = official_ids(home)[:2]
    before = [home.show(i) for i in ids]
    proc = home.vmjudge("rescore", "af2017", "--rerun-stages", "--entries", f"{ids[0]},{ids[1]}")
    assert proc.stdout.splitlines()[-1] == "queued again 2 of 2 chosen entries of af2017"
    for entry_id, old in zip(ids, before, strict=True):
        entry = home.queue.entry(entry_id)
        assert (entry.state, entry.stage, entry.evaluation) == ("queued", "prep", 2)
        shown = home.show(entry_id)
        assert shown["scorings"] == old["scorings"]
        assert "Evaluation in progress" in shown["report"]
    proc = home.vmjudge("rescore", "af2017", "--rerun-stages", "--entries", str(ids[0]), check=False)
    assert proc.returncode == 1
    assert f"entry {ids[0]} is queued (stage prep): wait until the daemon has finished it" in proc.stdout
    proc = home.vmjudge("rescore", "af2017", "--rerun-stages", "--scorer", "accuracy", check=False)
    assert proc.returncode == 1 and "leave out --scorer and --reference" in proc.stderr


def test_a_home_made_before_the_archive_is_migrated_and_rescored(tmp_path):
    """A queue.db of the previous schema and its results/ID/exam-results.json keep working."""
    home_dir = tmp_path / "home"
    (home_dir / "results" / "1").mkdir(parents=True)
    answers = {r: LABELS[r] for r in RECORDS}
    answers["B0001"] = None
    legacy = {"records": list(RECORDS), "statuses": dict.fromkeys(RECORDS, "ok"), "style": "answer-lines",
              "answers": answers}
    (home_dir / "results" / "1" / "exam-results.json").write_text(json.dumps(legacy, indent=1))
    with sqlite3.connect(home_dir / "queue.db") as db:
        db.executescript(OLD_SCHEMA)
        db.execute("INSERT INTO challenges VALUES ('af2017', ?, 'key', 'then')", (str(AF2017),))
        db.execute("INSERT INTO entries (challenge, owner, late, archive_sha256, archive_name, archive_path, "
                   "submitted_at, state, outcome, scores) VALUES ('af2017', 'old', 0, 'ab', 'o-entry.zip', '/x', "
                   "'then', 'done', 'scored', '{\"score\": 0.5}')")
        db.execute("INSERT INTO entries (challenge, owner, late, archive_sha256, archive_name, archive_path, "
                   "submitted_at, state, outcome, scores) SELECT challenge, 'older', late, archive_sha256, "
                   "archive_name, archive_path, submitted_at, state, outcome, scores FROM entries WHERE id = 1")
    (home_dir / "results" / "2").mkdir()
    (home_dir / "results" / "2" / "exam-results.json").write_text('{"records": [')  # cut short
    home = Home(load_site(home_dir), Queue(home_dir / "queue.db"), {1: answers})
    doc = json.loads(home.vmjudge("rescore", "af2017", "--json", check=False).stdout)
    e, broken = doc["entries"]
    assert (broken["entry_id"], broken["status"]) == (2, "refused") and not doc["ok"]
    assert "results/2/exam-results.json cannot be read" in broken["problem"]
    assert (e["entry_id"], e["old"], e["status"]) == (1, {"score": 0.5}, "rescored")
    assert e["new"]["score"] == pytest.approx(f1_mean(answers, LABELS))
    assert home.queue.exam_results(1).manifest == {"imported_from": str(home_dir / "results/1/exam-results.json")}
    assert [s["why"] for s in home.show(1)["scorings"]] == ["rescore"]


OLD_SCHEMA = """
CREATE TABLE challenges (name TEXT PRIMARY KEY, directory TEXT NOT NULL, image_key TEXT NOT NULL,
    registered_at TEXT NOT NULL);
CREATE TABLE entries (id INTEGER PRIMARY KEY AUTOINCREMENT, challenge TEXT NOT NULL REFERENCES challenges(name),
    owner TEXT NOT NULL, late INTEGER NOT NULL DEFAULT 0, archive_sha256 TEXT NOT NULL, archive_name TEXT NOT NULL,
    archive_path TEXT NOT NULL, submitted_at TEXT NOT NULL, state TEXT NOT NULL, stage TEXT, lease_owner TEXT,
    outcome TEXT, failed_stage TEXT, reason TEXT, scores TEXT, exam TEXT, finished_at TEXT);
CREATE TABLE stage_runs (id INTEGER PRIMARY KEY AUTOINCREMENT, entry_id INTEGER NOT NULL REFERENCES entries(id),
    stage TEXT NOT NULL, attempt INTEGER NOT NULL, host TEXT NOT NULL, slot INTEGER NOT NULL, started_at TEXT NOT NULL,
    finished_at TEXT, status TEXT, reason TEXT, message TEXT, manifest TEXT);
CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, entry_id INTEGER, at TEXT NOT NULL, kind TEXT NOT NULL,
    detail TEXT NOT NULL);
"""


def test_a_damaged_blob_is_refused(tmp_path):
    digest = put(tmp_path, encode(RECORDS, {}, "answer-lines", answers={}))
    assert put(tmp_path, encode(RECORDS, {}, "answer-lines", answers={})) == digest
    path = store_dir(tmp_path) / digest
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest
    path.write_bytes(path.read_bytes() + b" ")
    with pytest.raises(ArchiveError, match=r"are damaged \(their sha256 no longer matches\)"):
        get(tmp_path, digest)


def fail_prep_once(queue: Queue, entry_id: int) -> bool:
    """One infrastructure failure of the entry's prep; whether it was queued again."""
    with sqlite3.connect(queue.database.path) as db:  # skip the retry delay
        db.execute("UPDATE entries SET not_before = 0 WHERE id = ?", (entry_id,))
    run = queue.start_stage(queue.claim_next(only=entry_id).id, "prep", 0)
    return queue.infra_failure(run, "channel-broken", "the channel broke", {})


def test_running_and_parked_entries_are_refused_with_what_to_do(home):
    ids = official_ids(home)
    running, parked = ids[0], ids[1]
    home.queue.rerun(running)
    home.queue.start_stage(home.queue.claim_next(only=running).id, "prep", 0)
    home.queue.rerun(parked)
    assert [fail_prep_once(home.queue, parked) for _ in range(3)] == [True, True, False]
    proc = home.vmjudge("rescore", "af2017", "--entries", f"{running},{parked}", check=False)
    assert proc.returncode == 1
    assert proc.stdout.splitlines()[-3:] == [
        f"entry {running} (team0): not done: entry {running} is running (stage prep): wait until the daemon has "
        "finished it, then rescore it.",
        f"entry {parked} (team1): not done: entry {parked} is parked (channel-broken) at stage prep: fix the "
        "problem and run it again with --rerun-stages.",
        f"re-scored 0 of 2 chosen entries of af2017 (scorer af2017/2, reference "
        f"{hash_of_reference(AF2017 / 'reference')[:12]}): 0 with changed scores; 2 not done, see above",
    ]
    assert [s.why for i in (running, parked) for s in home.queue.scorings(i)] == ["official", "official"]
    proc = home.vmjudge("rescore", "af2017", "--rerun-stages", "--entries", str(running), check=False)
    assert proc.returncode == 1
    assert f"entry {running} is running (stage prep): wait until the daemon has finished it" in proc.stdout
    assert home.queue.entry(running).state == "running"


def test_a_rerun_entry_gets_its_full_retries_again(home, tmp_path):
    """Infrastructure failures are counted per evaluation: a parked entry run again starts with none."""
    queue = home.queue
    spooled = tmp_path / "p-entry.tar.gz"
    spooled.write_bytes(b"p")
    entry_id = queue.add_entry("af2017", "parker", False, "ef" * 32, spooled.name, spooled)

    def fail_prep() -> bool:
        return fail_prep_once(queue, entry_id)

    assert [fail_prep() for _ in range(3)] == [True, True, False]
    assert queue.entry(entry_id).state == "parked"
    proc = home.vmjudge("rescore", "af2017", "--rerun-stages", "--entries", str(entry_id))
    assert f"entry {entry_id} (parker): queued again from stage 1" in proc.stdout
    assert fail_prep() is True  # the fourth failure overall, the first of evaluation 2
    runs = queue.stage_runs(entry_id)
    assert [(r.attempt, r.evaluation) for r in runs] == [(1, 1), (2, 1), (3, 1), (4, 2)]


def test_rescore_of_the_examples_lists_what_version_2_of_their_scorers_changed(tmp_path, monkeypatch):
    """Entries first scored by the version-1 scorers (their code as released, in
    tests/scorers_v1), then re-scored by the current ones: the example entries keep their
    scores, and a beats2014 entry whose beats all come 38 samples late (inside bxb's window of
    0.15 s in whole samples at 250 Hz, outside version 1's exact 150 ms) goes from 0 to 1."""
    assert (af2017_v1.VERSION, beats2014_v1.VERSION) == (1, 1)
    site = load_site(tmp_path / "home")
    site.layout.ensure()
    queue = Queue(site.layout.queue_db)
    home = Home(site, queue, {})
    beats_test = load_challenge(EXAMPLES / "beats2014").test
    late_beats = {}
    for record in beats_test:
        ref = wfdb.rdann(str(EXAMPLES / "beats2014" / "reference" / record), "atr")
        wfdb.wrann(record, "qrs", ref.sample + 38, symbol=["N"] * len(ref.sample), fs=250, write_dir=str(tmp_path))
        late_beats[record] = (tmp_path / f"{record}.qrs").read_bytes()
    cases = {}
    for example in ("beats2014", "af2017"):
        ch = load_challenge(EXAMPLES / example)
        queue.add_challenge(example, ch.directory, "key")
        for case in ("good", "exam-errors"):
            cases[example, case] = host_replay(example, case, ch.test)
    cases["beats2014", "late"] = ExamResults(records=beats_test, files=late_beats)

    v1 = {"beats2014": beats2014_v1, "af2017": af2017_v1}
    real_builtin = loader._builtin
    monkeypatch.setattr(loader, "_builtin", lambda name: V1Shim(v1[name]) if name in v1 else real_builtin(name))
    ids = {key: judge_results(home, key[0], key[1], results) for key, results in cases.items()}
    monkeypatch.undo()
    for (example, case), entry_id in ids.items():
        official = home.show(entry_id)["scorings"][0]
        assert official["scorer_version"] == f"{example}/1"
        assert official["scores"] == pytest.approx(v1[example].score(cases[example, case], EXAMPLES / example /
                                                                      "reference"))
    assert home.show(ids["beats2014", "late"])["scores"]["score"] == 0.0

    for example in ("beats2014", "af2017"):
        proc = home.vmjudge("rescore", example)
        doc = json.loads(home.vmjudge("rescore", example, "--json").stdout)  # again: new == old now
        assert doc["changed"] == 0 and doc["scorer_version"] == f"{example}/2"
        lines = proc.stdout.splitlines()
        current = loader.load_scorer(example)
        for (ex, case), entry_id in ids.items():
            if ex != example:
                continue
            new = current(cases[ex, case], EXAMPLES / ex / "reference")
            line = next(x for x in lines if x.startswith(f"entry {entry_id} ({case}): "))
            if case == "late":
                assert new["score"] == 1.0
                assert line == (f"entry {entry_id} (late): score 0.0000 -> 1.0000 (changed: PPV_average, PPV_gross, "
                                "Se_average, Se_gross, score)")
            else:
                assert line.endswith(" (unchanged)"), line
            assert home.show(entry_id)["scores"] == pytest.approx(new)
        changed = 1 if example == "beats2014" else 0
        assert lines[-1].startswith(f"re-scored {len(lines) - 1} of {len(lines) - 1} chosen entries of {example} "
                                    f"(scorer {example}/2, ")
        assert lines[-1].endswith(f": {changed} with changed scores")


class V1Shim:
    """A version-1 scorer module as stage 4 calls a built-in today (with its [score] options,
    which version 1 did not have)."""

    def __init__(self, module):
        self.VERSION = module.VERSION
        self.score = lambda results, reference, options=None: module.score(results, reference)


FRAGILE_SCORER = '''
from pathlib import Path

from vmjudge.scorers.builtin import af2017


def score(results, reference):
    """af2017's, but broken on any entry that gave B0001 the label "O" until the file FIXED sits beside it."""
    if results.answers.get("B0001") == "O" and not (Path(__file__).parent / "FIXED").exists():
        raise KeyError("B0001")
    return af2017.score(results, reference)
'''


def test_a_scorer_that_fails_on_an_entry_holds_it_without_retries_and_rescore_scores_it(tmp_path, monkeypatch):
    """#59: the challenge's scorer raising on a real entry's results is the challenge's fault: the entry is parked
    at once (one attempt, no retry charged or spent), the organisers told once, and `vmjudge rescore` scores it once
    the scorer is fixed."""
    scorers = tmp_path / "scorers"
    scorers.mkdir()
    (scorers / "fragile_scorer.py").write_text(FRAGILE_SCORER)
    monkeypatch.syspath_prepend(str(scorers))
    home = make_home(tmp_path, official=0, late=0)
    directory = tmp_path / "af-fragile"
    shutil.copytree(AF2017, directory, ignore=shutil.ignore_patterns("entries"))
    toml = directory / "challenge.toml"
    toml.write_text(toml.read_text().replace('name = "af2017"', 'name = "af-fragile"')
                    .replace('scorer = "af2017"', 'scorer = "fragile_scorer:score"'))
    home.queue.add_challenge("af-fragile", directory, "key")
    answers = dict.fromkeys(RECORDS, "N") | {"B0001": "O"}
    entry_id = judge_results(home, "af-fragile", "ana", ExamResults(records=RECORDS, answers=answers))
    entry = home.queue.entry(entry_id)
    assert (entry.state, entry.reason) == ("parked", "scoring-error")
    runs = [r for r in home.queue.stage_runs(entry_id) if r.stage == "score"]
    assert [(r.status, r.reason) for r in runs] == [("infra", "scoring-error")]  # held at once, not retried
    assert home.queue.claim_next(only=entry_id) is None
    (scorers / "FIXED").touch()
    done = run_cli("rescore", "af-fragile", "--json", home=home.site.home,
                   env={**NO_VM_ENV, "PYTHONPATH": f"{scorers}:{REPO}"})
    assert done.returncode == 0, done.stdout + done.stderr
    [scoring] = home.queue.scorings(entry_id)
    assert scoring.scores["score"] == pytest.approx(f1_mean(answers, LABELS))
