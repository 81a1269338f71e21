"""`vmjudge challenge new` in real VMs: for each style and scorer, the challenge it writes is
registered by `challenge add`, its sample entry (the very archive it writes) goes through
`submit` and one `daemon --slots 2 --until-idle`, and every stage passes: scored, every test
record completed, score 1.0, first on the challenge's board. What an author starting from it
is told will happen (issue #34). Host-side checks of the same challenges are in
test_challenge_new.py.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from vmjudge.vm import domain

from .published import wait_until_published
from .test_challenge_new import CASES
from .test_pipeline import vmjudge


@pytest.fixture(scope="module")
def judged(site, image, conn):
    home = Path(tempfile.mkdtemp(prefix="challenge-new-", dir=site.home))
    os.chmod(home, 0o711)
    (home / "images").symlink_to(site.layout.images)  # the base image: the new challenges add no package
    ids, added = {}, {}
    for style, scorer in CASES:
        directory = home / "challenges" / f"new-{scorer}"
        said = vmjudge(home, "challenge", "new", str(directory), "--style", style, "--scorer", scorer).stdout
        assert f"vmjudge submit new-{scorer} {directory / 'entries' / 'sample-entry.tar.gz'}" in said
        added[scorer] = vmjudge(home, "challenge", "add", str(directory)).stdout
        archive = directory / "entries" / "sample-entry.tar.gz"
        ids[scorer] = int(vmjudge(home, "submit", f"new-{scorer}", str(archive), "--owner", "author").stdout)
    daemon = vmjudge(home, "daemon", "--slots", "2", "--until-idle")
    wait_until_published(home)
    yield home, ids, added, daemon.stderr
    assert domain.leftover_domains(conn) == []
    shutil.rmtree(home)


@pytest.mark.parametrize(("style", "scorer"), CASES)
def test_the_sample_entry_of_a_new_challenge_scores_one_in_real_vms(judged, style, scorer):
    home, ids, added, daemon_said = judged
    assert f"registered new-{scorer}: 6 training and 4 test records, scorer {scorer}" in added[scorer]
    doc = json.loads(vmjudge(home, "show", str(ids[scorer]), "--json").stdout)
    assert (doc["state"], doc["outcome"], doc["failed_stage"], doc["reason"]) == ("done", "scored", None, None), \
        doc["report"] + daemon_said
    assert doc["exam"] == {"records": 4, "completed": 4, "failed": 0, "timed_out": 0}
    assert doc["scores"]["score"] == 1.0, doc["scores"]
    assert "All 6 training records reproduced the submitted answers." in doc["report"]
    board = json.loads(vmjudge(home, "leaderboard", f"new-{scorer}", "--json").stdout)
    assert [(row["rank"], row["owner"], row["entry_id"]) for row in board] == [(1, "author", ids[scorer])]
