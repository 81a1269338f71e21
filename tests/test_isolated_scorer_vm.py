"""[score] isolate = true (#56) judged end to end in real VMs: a challenge made by `vmjudge challenge new`
whose scorer is the docs' own, a file beside challenge.toml, is scored in a VM of its image as the guest's
unprivileged user and gives what the same function gives on the host; a scorer that raises holds its entry
for the organiser at once, once, with what it printed, and tells the participant nothing but that the judge
failed; `vmjudge rescore` runs the scorer again in a VM, after a corrected reference as the host would score
it, and refuses, recording nothing, when the scorer returns no usable dict. Host side:
tests/test_isolated_scorer.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from vmjudge.config import load_challenge
from vmjudge.config.layout import Layout
from vmjudge.queue.db import Queue
from vmjudge.queue.results import archived_results, load
from vmjudge.vm import domain

from .host_lock import linked_home
from .published import wait_until_published
from .test_container_pipeline import Judged
from .test_isolated_scorer import EXACT, isolated_challenge
from .test_pipeline import vmjudge

RAISES = 'print("loading the labels...")\n\n\ndef exact(results, reference):\n    raise RuntimeError("no labels")\n'
GARBAGE = 'def exact(results, reference):\n    return {"score": "high"}\n'


def host_exact(home: Path, entry_id: int, directory: Path) -> dict:
    """The docs' scorer called on the host, on the entry's archived stage-3 results."""
    found = archived_results(Queue(Layout(home).queue_db), home, entry_id)
    assert found is not None
    namespace: dict = {}
    exec(compile(EXACT, "scoring.py", "exec"), namespace)
    return namespace["exact"](load(home, found.sha256), load_challenge(directory).reference_dir)


@pytest.fixture(scope="module")
def judged(site, image, conn):
    home = linked_home(site.home, "isolated-scorer-")
    ids = {}
    for name, scorer in (("good", EXACT), ("raises", RAISES)):
        directory = isolated_challenge(home / "work" / name, scorer=scorer)
        text = (directory / "challenge.toml").read_text()
        (directory / "challenge.toml").write_text(text.replace('name = "iso"', f'name = "iso-{name}"'))
        vmjudge(home, "challenge", "add", str(directory))
        ids[name] = int(vmjudge(home, "submit", f"iso-{name}", str(directory / "entries" / "sample-entry.tar.gz"),
                                "--owner", name).stdout)
    vmjudge(home, "daemon", "--slots", "2", "--until-idle")
    wait_until_published(home)
    judged = Judged(home, ids, {})
    good = home / "work" / "good" / "iso"
    judged.before = judged.show("good"), host_exact(home, ids["good"], good)
    # A corrected reference (its first label changed), then the board's entry scored again in a VM.
    reference = good / "reference" / "REFERENCE.csv"
    lines = reference.read_text().split()
    record, label = lines[0].split(",")
    reference.write_text("\n".join([f"{record},{'low' if label == 'high' else 'high'}", *lines[1:]]) + "\n")
    judged.rescored = json.loads(vmjudge(home, "rescore", "iso-good", "--json").stdout)
    judged.after = host_exact(home, ids["good"], good)
    (good / "scoring.py").write_text(GARBAGE)
    judged.garbage = vmjudge(home, "rescore", "iso-good", "--json", check=False)
    judged._shown.clear()
    yield judged
    assert domain.leftover_domains(conn) == []
    shutil.rmtree(home)


def score_attempts(judged, name: str) -> list[dict]:
    return [a for a in judged.show(name, organiser=True)["organiser"]["attempts"] if a["stage"] == "score"]


def test_the_isolated_scorer_gives_in_a_vm_what_it_gives_on_the_host_as_an_unprivileged_user(judged):
    doc, expected = judged.before
    assert (doc["state"], doc["outcome"]) == ("done", "scored"), doc["report"]
    assert {k: v for k, v in doc["scores"].items() if k != "uid"} == \
        {k: v for k, v in expected.items() if k != "uid"} == {"correct": 4.0, "score": 1.0}
    assert doc["scores"]["uid"] != 0  # the guest's entry user, not root
    (attempt,) = score_attempts(judged, "good")
    assert attempt["manifest"]["isolated"] is True and attempt["manifest"]["vm_seconds"] > 0
    assert attempt["manifest"]["scorer_version"].startswith("scoring.py:exact@")


def test_a_scorer_that_raises_holds_the_entry_once_and_tells_the_organiser_alone(judged):
    full = judged.show("raises", organiser=True)
    assert (full["state"], full["outcome"]) == ("parked", None), full["report"]
    (attempt,) = score_attempts(judged, "raises")  # never run again: a retry would fail alike
    assert (attempt["status"], attempt["reason"]) == ("infra", "scorer-failed"), attempt
    assert "the scorer exited with status 1" in attempt["message"] and "RuntimeError: no labels" in \
        attempt["message"], attempt["message"]
    doc = judged.show("raises")
    assert "could not be completed because of a problem on the judge's side" in doc["report"]
    assert "no labels" not in json.dumps(doc)


def test_rescore_runs_the_scorer_again_in_a_vm_as_the_host_would_score(judged):
    (entry,) = judged.rescored["entries"]
    assert entry["status"] == "rescored" and entry["new"]["score"] == pytest.approx(judged.after["score"]) == 0.75
    assert judged.rescored["scorer_version"].startswith("scoring.py:exact@")
    assert judged.show("good")["scores"]["score"] == 0.75


def test_a_rescore_whose_scorer_returns_no_usable_dict_records_nothing(judged):
    assert judged.garbage.returncode != 0
    assert "the scorer's result cannot be used" in judged.garbage.stderr and "'high'" in judged.garbage.stderr, \
        judged.garbage.stderr
    assert judged.show("good")["scores"]["score"] == 0.75  # the rescore before it stands
