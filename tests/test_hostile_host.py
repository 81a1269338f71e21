"""The hostile corpus's host-side verdicts, without a VM: each case's archive goes through the
real `admit` and, once accepted, the real prep stage, whose runner refuses to start a VM.

tests/test_hostile.py runs the whole corpus with VMs; this shows in seconds that every case the
host decides (refused at submit, or failed at prep for a host reason) gets the corpus's verdict
without a VM, and that every other case gets past the host's checks to the point where prep would
boot one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from vmjudge.config import Site, load_challenge
from vmjudge.errors import EntryError
from vmjudge.images.image import GuestImage
from vmjudge.queue.admit import admit
from vmjudge.queue.db import Queue
from vmjudge.stages.context import StageContext
from vmjudge.stages.prep import stage as prep

from .hostile.cases import CASES, REFUSED, Case

CHALLENGE = Path(__file__).resolve().parent / "hostile" / "challenge"


class ReachedVm(Exception):
    """Prep asked for the entry's home disk: every host check has passed."""


class NoVm:
    def new_home(self, path: Path, size_mib: int) -> None:
        raise ReachedVm

    def overlay(self, path: Path, backing: Path) -> None:
        raise AssertionError("prep makes no overlay")

    def run(self, *args, **kwargs):
        raise AssertionError("a VM was started before the home disk was made")


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    path = tmp_path_factory.mktemp("home")
    queue = Queue(path / "queue.db")
    queue.add_challenge("hostile", CHALLENGE, "key")
    return Site(home=path), queue


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_host_gives_each_case_its_verdict(home, tmp_path, case: Case):
    site, queue = home
    challenge = load_challenge(CHALLENGE)
    archive = case.build(tmp_path)
    if case.expect == REFUSED:
        with pytest.raises(EntryError) as info:
            admit(site, queue, "hostile", challenge, archive, case.name, False)
        assert case.says in str(info.value)
        return
    entry_id = admit(site, queue, "hostile", challenge, archive, case.name, False).entry_id
    ctx = StageContext(site=site, challenge=challenge, image=GuestImage(tmp_path, {"key": "k", "sha256": {}}),
                       entry=queue.entry(entry_id), attempt=1, runner=NoVm())
    if case.reaches_vm:
        with pytest.raises(ReachedVm):
            prep.run(ctx)
        return
    outcome = prep.run(ctx)
    assert (outcome.status, "prep", outcome.reason) == case.expect
    assert case.says in outcome.message
    assert not (ctx.results_dir / "install").exists()
