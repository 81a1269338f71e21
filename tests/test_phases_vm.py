"""#40's acceptance with real VMs: a three-phase contest judged end to end by the daemon.

The contest is the hostile corpus's small challenge (a line of shell per record, a stage in
little more than a boot) cut into HECKTOR's three phases (tests/phased.py): sanity (2 records,
uploads, full feedback), validation (4 records, entries carried from sanity) and test (8
records, entries carried from validation by promoted owners only, feedback "errors", its board
hidden until published). Three owners: alice and bob pass sanity, carol's setup.sh fails it;
alice and bob carry their entries into validation, where the board ranks alice first; the top
2 are promoted; each carries one entry into test; carol's carries are refused. Until the
organiser publishes the test phase, no participant document of it (show, show --json, the
report page, the portal's pages and API, the board in every format) carries a count, a figure
or a score; after, they do.

19 VM stages in three daemon runs of two slots each.

test_a_phase_with_its_own_training_set_and_image: a two-phase contest whose final phase has a
training set (f1-f3) and an image (python3-numpy, a recipe the examples' tests build) of its own;
each phase's quiz runs on its own training records, in its own image (9 VM stages, one daemon run).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from vmjudge.config import ImageRecipe, load_site
from vmjudge.images.build import build_image
from vmjudge.queue.db import Queue
from vmjudge.vm import domain
from vmjudge.web.app import create_app

from .hostile.cases import tar_of
from .phased import QUICK, SETS, accuracy, contest_dir, write_sets, write_training
from .published import wait_until_published
from .test_pipeline import vmjudge
from .web_home import sign_in

pytestmark = pytest.mark.timeout(900)

# bob's entry answers 0 for v1 and v2, which only validation has: his training answers are alice's.
BOB_NEXT = b"""#!/bin/sh
case "$1" in
v1|v2) echo "$1,0" >> answers.txt ;;
*) echo "$1,$(cat "$1.txt")" >> answers.txt ;;
esac
"""
CAROL_SETUP = b"#!/bin/sh\necho 'cannot build the model'\nexit 1\n"


@pytest.fixture
def home(site, image, conn):
    home = Path(tempfile.mkdtemp(prefix="phases-", dir=site.home))
    os.chmod(home, 0o711)
    (home / "images").symlink_to(site.layout.images)
    # Each phase's exam capped at 30 s ([phase.limits] over the challenge's 60): participants see an
    # exam's outcome from the next tenth of its cap, so the test waits 3 s for it rather than 6.
    faster = "[phase.limits]\nexam_total = 30"
    vmjudge(home, "challenge", "add", str(contest_dir(home, sanity=faster, validation=faster, test=faster)))
    yield home
    assert domain.leftover_domains(conn) == []
    subprocess.run(["rm", "-rf", str(home)], check=True, timeout=300)


def refused(home: Path, *args: str) -> str:
    proc = vmjudge(home, *args, check=False)
    assert proc.returncode == 1 and proc.stdout == "", proc.stdout + proc.stderr
    return proc.stderr.removeprefix("vmjudge: ").rstrip("\n")


def daemon(home: Path) -> float:
    """The daemon with two slots until the queue is idle; how long it took."""
    started = time.monotonic()
    vmjudge(home, "daemon", "--slots", "2", "--until-idle")
    return time.monotonic() - started


def participant_json(home: Path, entry_id: int) -> dict:
    return json.loads(vmjudge(home, "show", str(entry_id), "--json").stdout)


def test_a_three_phase_contest(home):
    queue = Queue(home / "queue.db")
    took = {}
    archives = {"alice": tar_of({}, home / "alice-entry.tar.gz"),
                "bob": tar_of({"next.sh": BOB_NEXT}, home / "bob-entry.tar.gz"),
                "carol": tar_of({"setup.sh": CAROL_SETUP}, home / "carol-entry.tar.gz")}
    sanity = {owner: int(vmjudge(home, "submit", "contest", str(path), "--owner", owner).stdout)
              for owner, path in archives.items()}
    took["sanity"] = daemon(home)
    wait_until_published(home)
    assert [(queue.entry(e).outcome, queue.entry(e).phase) for e in sanity.values()] == \
        [("scored", "sanity"), ("scored", "sanity"), ("failed", "sanity")]
    assert participant_json(home, sanity["alice"])["scores"]["score"] == 1.0  # full feedback
    carol = participant_json(home, sanity["carol"])
    assert (carol["failed_stage"], carol["reason"]) == ("prep", "setup-error")
    assert "cannot build the model" in carol["report"]  # sanity tells the error in full
    assert refused(home, "carry", "contest", str(sanity["carol"]), "--phase", "validation") == (
        f"entry {sanity['carol']} did not pass phase sanity of contest: only an entry that passed it can be carried "
        "into phase validation.")

    validation = {o: int(vmjudge(home, "carry", "contest", str(sanity[o]), "--phase", "validation").stdout)
                  for o in ("alice", "bob")}
    took["validation"] = daemon(home)
    wait_until_published(home)
    board = json.loads(vmjudge(home, "leaderboard", "contest", "--phase", "validation", "--json").stdout)
    assert [(r["owner"], r["entry_id"], r["score"]) for r in board] == [
        ("alice", validation["alice"], 0.75), ("bob", validation["bob"], 0.25)]  # v4's reference is 0
    assert refused(home, "carry", "contest", str(validation["alice"]), "--phase", "test") == (
        "alice was not promoted to phase test of contest: only the owners the organisers promoted from phase "
        "validation may enter it.")
    assert vmjudge(home, "promote", "contest", "--phase", "test", "--top", "2", "--by", "olga").stdout == (
        "promoted alice into phase test (place 1 of validation), top 2 of validation\n"
        "promoted bob into phase test (place 2 of validation), top 2 of validation\n")

    test = {o: int(vmjudge(home, "carry", "contest", str(validation[o]), "--phase", "test").stdout)
            for o in ("alice", "bob")}
    assert refused(home, "carry", "contest", str(sanity["carol"]), "--phase", "test").startswith(
        "carol was not promoted to phase test of contest")
    assert refused(home, "carry", "contest", str(validation["bob"]), "--phase", "test").startswith(
        f"entry {validation['bob']} was carried into phase test already, as entry {test['bob']}")
    took["test"] = daemon(home)
    wait_until_published(home)  # each exam's own publish time: what stays hidden now is the phase's doing
    for owner, entry in test.items():
        organiser = json.loads(vmjudge(home, "show", str(entry), "--json", "--organiser").stdout)
        assert organiser["outcome"] == "scored" and organiser["exam"]["records"] == 8, owner
        assert organiser["organiser"]["attempts"][0]["stage"] == "prep"  # judged again from stage 1
        exam = next(a for a in organiser["organiser"]["attempts"] if a["stage"] == "exam")
        assert exam["figures"]["stage_limit"] == 30.0  # the phase's own limit
        # Feedback "errors": the verdict appears at the exam's cap whatever the exam took (later only
        # when the result itself was ready later, and then at a tenth's boundary).
        row = queue.entry(entry)
        tenths_after = (row.published - row.exam_started) / 3.0
        assert tenths_after >= 10 - 1e-6 and tenths_after == pytest.approx(round(tenths_after)), (owner, tenths_after)
    score = accuracy("test", {r: str(number) for r, (number, _) in SETS["test"].items()})
    assert {o: queue.entry(e).scores["score"] for o, e in test.items()} == {"alice": score, "bob": score} and \
        score == 0.625

    # Before publication: nothing of the test phase's counts, figures or scores reaches a participant.
    site = load_site(home)
    token = vmjudge(home, "owner", "add", "alice").stdout.strip().split()[-1]
    client = TestClient(create_app(site, secure_cookies=False), raise_server_exceptions=False, follow_redirects=False)
    sign_in(client, token)
    bearer = {"Authorization": f"Bearer {token}"}

    def documents(entry: int) -> dict[str, str]:
        return {"show": vmjudge(home, "show", str(entry)).stdout,
                "show --json": vmjudge(home, "show", str(entry), "--json").stdout,
                "report.html": site.layout.results_of(entry).report.read_text(),
                "page": client.get(f"/entries/{entry}").text, "api": client.get(f"/api/entries/{entry}",
                                                                                 headers=bearer).text,
                "entries.json": client.get("/entries.json").text, "board page": client.get(
                    "/leaderboards/contest?phase=test").text}

    hidden = documents(test["alice"])
    doc = json.loads(hidden["show --json"])
    assert (doc["state"], doc["outcome"], doc["scores"], doc["exam"], doc["figures"], doc["feedback"]) == \
        ("done", "scored", {}, None, {}, "errors")
    for name, text in hidden.items():
        assert "0.625" not in text and "/10 of the" not in text and "completed" not in text, name
        assert "8 test records" not in text and "Resources" not in text, name
    assert "hidden until the organisers publish" in hidden["board page"]
    for fmt in ((), ("--json",), ("--csv", str(home / "board.csv")), ("--html", str(home / "board.html"))):
        assert refused(home, "leaderboard", "contest", "--phase", "test", *fmt).startswith(
            "The board of phase test of contest is hidden until the organisers publish the phase's results (")
    assert not (home / "board.csv").exists() and not (home / "board.html").exists()
    phases = client.get("/api/challenges/contest/phases", headers=bearer).json()["phases"]
    assert [(p["name"], [x["owner"] for x in p["promoted"]]) for p in phases] == [
        ("sanity", []), ("validation", []), ("test", ["alice", "bob"])]

    vmjudge(home, "publish", "contest", "--phase", "test", "--by", "olga")
    shown = documents(test["alice"])
    doc = json.loads(shown["show --json"])
    assert (doc["scores"]["score"], doc["exam"]["records"], doc["feedback"]) == (score, 8, "full")
    assert set(doc["figures"]) == {"prep", "quiz", "exam"} and "8 test records: 8 completed" in shown["show"]
    assert "0.6250" in shown["report.html"] and "0.6250" in shown["board page"]
    board = json.loads(vmjudge(home, "leaderboard", "contest", "--phase", "test", "--json").stdout)
    assert [r["owner"] for r in board] == ["alice", "bob"]  # a tie: the earlier carry first
    print(f"\nVM time per phase (wall, daemon --slots 2): {json.dumps({k: round(v, 1) for k, v in took.items()})}")


OWN_PHASES = """
[[phase]]
name = "warmup"
[phase.limits]
exam_total = 30

[[phase]]
name = "final"
training = "phases/final/training"
[phase.limits]
exam_total = 30
[phase.image]
packages = ["python3-numpy"]
"""
# The final phase's own training set: records the challenge's training/ (r1, r2) does not have.
OWN_TRAINING = {"f1": 7, "f2": 8, "f3": 9}
NUMPY_SETUP = b"#!/bin/sh\npython3 -c 'import numpy; print(\"numpy\", numpy.__version__)'\n"


@pytest.fixture
def own_home(site, image, conn):
    """A home with the contest "own" registered: its warmup phase has the challenge's training set
    and image, its final phase its own of both (the numpy image: built here if the examples' tests
    have not built it yet, about a minute)."""
    numpy = build_image(site, ImageRecipe(packages=("python3-numpy",)), progress=print)
    home = Path(tempfile.mkdtemp(prefix="phases-own-", dir=site.home))
    os.chmod(home, 0o711)
    (home / "images").symlink_to(site.layout.images)
    directory = home / "own"
    shutil.copytree(QUICK, directory)
    shutil.rmtree(directory / "test")
    shutil.rmtree(directory / "reference")
    write_sets(directory, {"warmup": SETS["sanity"], "final": SETS["validation"]})
    write_training(directory, "phases/final/training", OWN_TRAINING)
    toml = (QUICK / "challenge.toml").read_text().replace('name = "hostile"', 'name = "own"') + OWN_PHASES
    (directory / "challenge.toml").write_text(toml)
    added = vmjudge(home, "challenge", "add", str(directory))
    assert "final (3 training and 4 test records)" in added.stdout and "2 images" in added.stdout, added.stdout
    yield home, image, numpy
    assert domain.leftover_domains(conn) == []
    subprocess.run(["rm", "-rf", str(home)], check=True, timeout=300)


def test_a_phase_with_its_own_training_set_and_image(own_home):
    home, base, numpy = own_home
    queue = Queue(home / "queue.db")
    final_answers = "".join(f"{r},{n}\n" for r, n in OWN_TRAINING.items()).encode()
    entries = {
        # The final phase's entry answers its training set, and its setup.sh needs its image's numpy.
        "alice": ("final", {"answers.txt": final_answers, "setup.sh": NUMPY_SETUP}),
        # The good entry as it is: answers for the challenge's r1 and r2, not the final phase's records.
        "bob": ("final", {}),
        # In the warmup phase, the challenge's image: no numpy there.
        "carol": ("warmup", {"setup.sh": NUMPY_SETUP}),
        "dave": ("warmup", {}),
    }
    ids = {owner: int(vmjudge(home, "submit", "own", str(tar_of(files, home / f"{owner}-entry.tar.gz")), "--owner",
                              owner, "--phase", phase).stdout)
           for owner, (phase, files) in entries.items()}
    took = daemon(home)
    rows = {owner: queue.entry(i) for owner, i in ids.items()}
    assert {o: (r.phase, r.outcome, r.failed_stage, r.reason) for o, r in rows.items()} == {
        "alice": ("final", "scored", None, None), "bob": ("final", "failed", "quiz", "quiz-mismatch"),
        "carol": ("warmup", "failed", "prep", "setup-error"), "dave": ("warmup", "scored", None, None)}
    runs = {o: {r.stage: r for r in queue.stage_runs(i)} for o, i in ids.items()}
    # Each phase's quiz ran on its own training records, in its own image.
    assert runs["alice"]["quiz"].message == "All 3 training records reproduced the submitted answers."
    assert runs["dave"]["quiz"].message == "All 2 training records reproduced the submitted answers."
    assert runs["bob"]["quiz"].message.startswith("next.sh f1: output does not match submission")
    assert "numpy" in runs["alice"]["prep"].message and "No module named 'numpy'" in runs["carol"]["prep"].message
    assert {o: {s: r.manifest["image"] for s, r in stages.items() if s != "score"} for o, stages in runs.items()} == {
        "alice": dict.fromkeys(("prep", "quiz", "exam"), numpy.key), "bob": dict.fromkeys(("prep", "quiz"), numpy.key),
        "carol": {"prep": base.key}, "dave": dict.fromkeys(("prep", "quiz", "exam"), base.key)}
    # Each phase is scored on its own test set: final's v4 reference is 0.
    assert (rows["alice"].scores["score"], rows["dave"].scores["score"]) == (0.75, 1.0)
    print(f"\n9 VM stages of a contest with a phase's own training set and image: {took:.1f} s (daemon --slots 2)")
