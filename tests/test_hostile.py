"""The hostile corpus (tests/hostile/cases.py) end to end: submit, one daemon, real VMs.

After each hostile entry that reaches a VM, a good entry is queued; every good entry must
get the same score, showing that nothing a hostile entry did reached the judge or the
entries behind it. The daemon must finish the whole queue.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from vmjudge.supervisor import vm

from .hostile.cases import CASES, REFUSED, Case, tar_of
from .test_pipeline import vmjudge

CHALLENGE = Path(__file__).resolve().parent / "hostile" / "challenge"


class Corpus:
    def __init__(self, home: Path):
        self.home = home
        self.ids: dict[str, int] = {}
        self.refusals: dict[str, str] = {}
        self.good: list[int] = []

    def show(self, entry_id: int) -> dict:
        return json.loads(vmjudge(self.home, "show", str(entry_id), "--json").stdout)


@pytest.fixture(scope="module")
def corpus(site, conn):
    home = Path(tempfile.mkdtemp(prefix="hostile-", dir=site.home))
    os.chmod(home, 0o711)
    (home / "images").symlink_to(site.images_dir)
    vmjudge(home, "challenge", "add", str(CHALLENGE))
    c = Corpus(home)
    scratch = Path(tempfile.mkdtemp(prefix="archives-", dir=home))
    good = tar_of({}, scratch / "good-entry.tar.gz")
    for case in CASES:
        work = scratch / case.name
        work.mkdir()
        archive = case.build(work)
        proc = vmjudge(home, "submit", "hostile", str(archive), "--owner", case.name, check=False)
        if case.expect == REFUSED:
            assert proc.returncode == 1, f"{case.name} was accepted: {proc.stdout}"
            c.refusals[case.name] = proc.stderr
            continue
        assert proc.returncode == 0, f"{case.name} was refused: {proc.stderr}"
        c.ids[case.name] = int(proc.stdout)
        if case.reaches_vm:
            c.good.append(int(vmjudge(home, "submit", "hostile", str(good), "--owner", f"after-{case.name}").stdout))
    vmjudge(home, "daemon", "--slots", "2", "--until-idle")
    yield c
    assert vm.leftover_domains(conn) == []
    shutil.rmtree(home)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_entry_gets_its_verdict(corpus, case: Case):
    if case.expect == REFUSED:
        assert case.says in corpus.refusals[case.name]
        assert "Traceback" not in corpus.refusals[case.name]
        return
    doc = corpus.show(corpus.ids[case.name])
    assert (doc["state"], doc["outcome"], doc["failed_stage"], doc["reason"]) == ("done", *case.expect), \
        doc["report"]
    assert case.says in doc["report"]
    if case.expect[0] == "scored":
        assert doc["scores"] == corpus.show(corpus.good[0])["scores"]


def test_good_entries_behind_hostile_ones_score_the_same(corpus):
    scores = [corpus.show(i)["scores"] for i in corpus.good]
    assert len(scores) == sum(1 for c in CASES if c.reaches_vm)
    assert scores[0] == {"correct": 2.0, "records": 3.0, "score": pytest.approx(2 / 3)}
    assert all(s == scores[0] for s in scores)


def test_nothing_was_retried_or_parked(corpus):
    """Every verdict above is the entry's own: no infrastructure failure was charged or hidden."""
    for entry_id in list(corpus.ids.values()) + corpus.good:
        doc = json.loads(vmjudge(corpus.home, "show", str(entry_id), "--json", "--organiser").stdout)
        infra = [(a["stage"], a["reason"], a["message"]) for a in doc["organiser"]["attempts"]
                 if a["status"] == "infra"]
        assert infra == [], f"entry {entry_id}: {infra}"
    assert list(corpus.home.glob("spool/*/*")) and not any(corpus.home.glob("spool/*/*.tmp*"))
