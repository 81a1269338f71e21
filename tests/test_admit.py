"""Admitting an entry through the real `admit` (no VMs): the checks run on the copy stored in
the spool, with the challenge's own limits, and a refusal leaves the spool as it was."""

from __future__ import annotations

import fcntl
import hashlib
import threading
import zipfile
from pathlib import Path

import pytest

from vmjudge.config import Site, load_challenge
from vmjudge.errors import EntryError
from vmjudge.queue.admit import admit
from vmjudge.queue.db import Queue
from vmjudge.queue.spool import Spool, StagedArchive

from .test_spool import make_tar, make_zip


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
    copies it (after any check of the file as given), or just after it was copied."""

    def __init__(self, root: Path, replacement: bytes, when: str):
        super().__init__(root)
        self.replacement, self.when = replacement, when

    def stage(self, source: Path) -> StagedArchive:
        if self.when == "before":
            source.write_bytes(self.replacement)
        staged = super().stage(source)
        if self.when == "after":
            source.write_bytes(self.replacement)
        return staged


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


@pytest.mark.parametrize("content, says", [
    (b"just text\n", "a-entry.tar.gz is not a readable tar.gz archive, or is damaged: make it again"),
    (None, "The entry archive holds more than 5 members"),
])
def test_a_refused_archive_leaves_no_file_in_the_spool(home, content, says):
    archive = home.archives / "a-entry.tar.gz"
    if content is None:
        make_tar(archive, entry_files(9))  # readable, but over max_members
    else:
        archive.write_bytes(content)
    with pytest.raises(EntryError) as info:
        home.admit(archive)
    assert str(info.value).startswith(says) and info.value.reason == "bad-archive"
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
    with pytest.raises(EntryError) as info:
        home.admit(archive)
    assert str(info.value) == ("big-entry.zip is 52,428,801 bytes, over the 52,428,800 bytes that adm "
                               "accepts: make the entry smaller and submit again.")
    assert not (home.path / "spool").exists() and home.queue.entries() == []


def zip_of_size(path: Path, size: int) -> Path:
    """A readable entry zip of exactly `size` bytes (padded with the archive comment)."""
    make_zip(path, {"setup.sh": b"true\n", "next.sh": b"true\n"})
    with zipfile.ZipFile(path, "a") as zf:
        zf.comment = b"x" * (size - path.stat().st_size)
    assert path.stat().st_size == size
    return path


def test_an_archive_of_exactly_max_size_is_accepted_and_one_byte_more_is_refused(tmp_path):
    challenge = tmp_path / "small"
    challenge.mkdir()
    (challenge / "challenge.toml").write_text('name = "small"\n[entry]\nmax_size = 4000\n')
    ch = load_challenge(challenge)
    site = Site(home=tmp_path / "home")
    site.home.mkdir()
    queue = Queue(site.layout.queue_db)
    queue.add_challenge("small", challenge, "key")

    exact = zip_of_size(tmp_path / "exact-entry.zip", 4000)
    admitted = admit(site, queue, "small", ch, exact, "alice", False)
    assert [e.id for e in queue.entries()] == [admitted.entry_id]
    stored = sorted(site.home.glob("spool/*/*"))
    assert [p.read_bytes() for p in stored] == [exact.read_bytes()]

    over = zip_of_size(tmp_path / "over-entry.zip", 4001)
    with pytest.raises(EntryError) as info:
        admit(site, queue, "small", ch, over, "bob", False)
    assert info.value.reason == "bad-archive"
    assert str(info.value) == ("over-entry.zip is 4,001 bytes, over the 4,000 bytes that small accepts: "
                               "make the entry smaller and submit again.")
    assert [e.id for e in queue.entries()] == [admitted.entry_id]
    assert sorted(site.home.glob("spool/*/*")) == stored


def test_an_archive_is_checked_without_the_admission_lock(home):
    """Listing a tar.gz means decompressing all of it: one archive's checks must not hold up
    every other admission. With the lock held elsewhere, a broken archive is still refused (its
    checks took no lock), and its staged copy is gone; a good one is queued once the lock is free."""
    broken = home.archives / "b-entry.tar.gz"
    broken.write_bytes(b"\x1f\x8b" + b"\0" * 100)
    good = make_tar(home.archives / "g-entry.tar.gz", entry_files(3))
    outcome: dict[str, object] = {}

    def admit_into(key: str, archive: Path) -> None:
        try:
            outcome[key] = home.admit(archive)
        except EntryError as exc:
            outcome[key] = exc

    home.site.layout.ensure()
    with open(home.site.layout.submit_lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        refused = threading.Thread(target=admit_into, args=("broken", broken))
        refused.start()
        refused.join(timeout=60)
        assert not refused.is_alive(), "the checks waited for the admission lock"
        assert isinstance(outcome["broken"], EntryError) and home.spooled() == []
        queued = threading.Thread(target=admit_into, args=("good", good))
        queued.start()
    queued.join(timeout=60)
    assert not queued.is_alive() and home.queue.entry(outcome["good"].entry_id).archive_name == "g-entry.tar.gz"
    assert [p.parent.name for p in home.spooled()] != ["incoming"] and len(home.spooled()) == 1
