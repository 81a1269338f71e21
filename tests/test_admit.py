"""Admitting an entry through the real `admit` (no VMs): the checks run on the copy stored in
the spool, with the challenge's own limits, and a refusal leaves the spool as it was."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from vmjudge.config import Site, load_challenge
from vmjudge.errors import EntryError
from vmjudge.queue.admit import admit
from vmjudge.queue.db import Queue
from vmjudge.queue.spool import Spool, StoredArchive

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


class SwappingSpool(Spool):
    """The spool, with the participant's file replaced at a chosen moment: just before the spool
    reads it (after any check of the file as given), or just after it was stored."""

    def __init__(self, root: Path, replacement: bytes, when: str):
        super().__init__(root)
        self.replacement, self.when = replacement, when

    def store(self, source: Path) -> StoredArchive:
        if self.when == "before":
            source.write_bytes(self.replacement)
        stored = super().store(source)
        if self.when == "after":
            source.write_bytes(self.replacement)
        return stored


def test_the_checks_read_the_stored_copy_not_the_file_given(home):
    # A readable archive handed over, swapped for junk as the spool copies it: the stored junk is
    # what prep would unpack, so it is what is refused, and it is taken back out of the spool.
    archive = make_tar(home.archives / "a-entry.tar.gz", entry_files(3))
    spool = SwappingSpool(home.path / "spool", b"not an archive at all\n" * 10, when="before")
    with pytest.raises(EntryError) as info:
        home.admit(archive, spool=spool)
    assert str(info.value).startswith("a-entry.tar.gz is not a readable tar.gz archive")
    assert home.spooled() == [] and home.queue.entries() == []


def test_a_swap_after_storing_changes_nothing(home):
    archive = make_tar(home.archives / "a-entry.tar.gz", entry_files(3))
    original = hashlib.sha256(archive.read_bytes()).hexdigest()
    spool = SwappingSpool(home.path / "spool", b"not an archive at all\n", when="after")
    admitted = home.admit(archive, spool=spool)
    entry = home.queue.entry(admitted.entry_id)
    assert entry.archive_sha256 == original
    assert hashlib.sha256(Path(entry.archive_path).read_bytes()).hexdigest() == original
    assert archive.read_bytes() == b"not an archive at all\n"


@pytest.mark.parametrize("content", [b"just text\n", None])
def test_a_refused_archive_leaves_no_file_in_the_spool(home, content):
    archive = home.archives / "a-entry.tar.gz"
    if content is None:
        make_tar(archive, entry_files(9))  # readable, but over max_members
    else:
        archive.write_bytes(content)
    with pytest.raises(EntryError):
        home.admit(archive)
    assert home.spooled() == [] and home.queue.entries() == []


def test_a_refusal_keeps_the_same_bytes_stored_for_another_entry(home):
    archive = make_tar(home.archives / "a-entry.tar.gz", entry_files(3))
    first = home.admit(archive)
    stored = home.spooled()
    assert len(stored) == 1
    with pytest.raises(EntryError) as info:  # alice's one place is taken: refused at the limit
        home.admit(archive)
    assert info.value.reason == "entry-limit"
    assert home.spooled() == stored and stored[0].is_file()
    assert [e.id for e in home.queue.entries()] == [first.entry_id]


def test_a_refusal_at_the_entry_limit_takes_back_what_it_stored(home):
    home.admit(make_tar(home.archives / "a-entry.tar.gz", entry_files(3)))
    stored = home.spooled()
    with pytest.raises(EntryError) as info:
        home.admit(make_tar(home.archives / "b-entry.tar.gz", entry_files(4)))
    assert info.value.reason == "entry-limit"
    assert home.spooled() == stored


def test_an_oversized_archive_is_refused_before_it_is_copied(home, tmp_path):
    archive = home.archives / "big-entry.zip"
    with open(archive, "wb") as f:
        f.truncate(home.challenge.entry.max_size + 1)
    with pytest.raises(EntryError, match="big-entry.zip is 52.4 MB, over the 52.4 MB that adm accepts"):
        home.admit(archive)
    assert not (home.path / "spool").exists()
