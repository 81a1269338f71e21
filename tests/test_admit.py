"""Admitting an entry through the real `admit` (no VMs): the checks run on the copy stored in
the spool, with the challenge's own limits, and a refusal leaves the spool as it was."""

from __future__ import annotations

from pathlib import Path

import pytest

from vmjudge.config import Site, load_challenge
from vmjudge.errors import EntryError
from vmjudge.queue.admit import admit
from vmjudge.queue.db import Queue

from .test_spool import make_tar


class Home:
    """A vmjudge home with challenge "adm" registered (max_members 5)."""

    def __init__(self, tmp_path: Path):
        self.path = tmp_path / "home"
        self.path.mkdir()
        challenge = tmp_path / "adm"
        challenge.mkdir()
        (challenge / "challenge.toml").write_text('name = "adm"\n[entry]\nmax_members = 5\nmax_scored_per_owner = 1\n')
        self.challenge = load_challenge(challenge)
        self.site = Site(home=self.path)
        self.queue = Queue(self.path / "queue.db")
        self.queue.add_challenge("adm", challenge, "key")
        self.archives = tmp_path / "archives"
        self.archives.mkdir()

    def admit(self, archive: Path, owner: str = "alice", **kw):
        return admit(self.site, self.queue, "adm", self.challenge, archive, owner, False, **kw)

    def spooled(self) -> list[Path]:
        return sorted(self.path.glob("spool/*/*"))


@pytest.fixture
def home(tmp_path) -> Home:
    return Home(tmp_path)


def entry_files(n: int) -> dict[str, bytes]:
    return {f"./f{i}": b"x" for i in range(n - 2)} | {"./setup.sh": b"true\n", "./next.sh": b"true\n"}


def test_submit_applies_the_challenges_member_limit(home):
    home.admit(make_tar(home.archives / "a-entry.tar.gz", entry_files(5)))
    with pytest.raises(EntryError) as info:
        home.admit(make_tar(home.archives / "b-entry.tar.gz", entry_files(6)), owner="bob")
    assert str(info.value) == ("The entry archive holds more than 5 members: ship fewer files (pack many small ones "
                               "into one) and submit again.")
    assert len(home.spooled()) == 1 and len(home.queue.entries()) == 1
