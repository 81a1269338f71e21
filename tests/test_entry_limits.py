"""Entry limits per owner, through the real `vmjudge submit` (no VMs): entries are taken to
their outcomes with the queue's own API, as the daemon would leave them.

What counts against `[entry] max_scored_per_owner`: scored entries, and queued or running ones
(they may yet be scored); failed, dry-run and parked ones give their place back; an archive
holding DRYRUN never counts; each owner and each board (official, late) has its own count.
"""

from __future__ import annotations

import concurrent.futures
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

from vmjudge.archive.checks import declares_dry_run
from vmjudge.queue import db as db_module
from vmjudge.queue.db import Queue
from vmjudge.queue.retry import MAX_INFRA_ATTEMPTS, RETRY_DELAYS
from vmjudge.queue.rows import Usage

from .cli import run_cli
from .test_spool import make_tar


class Home:
    """A vmjudge home with challenge "lim" registered (its image is never needed here)."""

    def __init__(self, tmp_path: Path, limit: int | None, url: str | None = None, host: str = "h"):
        tmp_path.mkdir(exist_ok=True)
        self.path = tmp_path / "home"
        self.path.mkdir()
        if url:  # one of several hosts sharing a PostgreSQL queue
            (self.path / "site.toml").write_text(f'[queue]\nurl = "{url}"\nhost = "{host}"\n')
        challenge = tmp_path / "lim"
        challenge.mkdir()
        (challenge / "challenge.toml").write_text(
            'name = "lim"\n' + (f"[entry]\nmax_scored_per_owner = {limit}\n" if limit else ""))
        self.queue = Queue(url or self.path / "queue.db", host=host)
        self.queue.add_challenge("lim", challenge, "key")
        self.archives = tmp_path / "archives"
        self.archives.mkdir()
        self.made = 0

    def archive(self, dry_run: bool = False) -> Path:
        """A new entry archive, each with different content (the spool stores by content)."""
        self.made += 1
        path = self.archives / f"e{self.made}-entry.tar.gz"
        files = {"./setup.sh": b"true\n", "./next.sh": f"echo {self.made}\n".encode()}
        if dry_run:
            files["./DRYRUN"] = b""
        return make_tar(path, files)

    def submit(self, owner: str = "alice", late: bool = False, dry_run: bool = False,
               archive: Path | None = None) -> subprocess.CompletedProcess:
        archive = archive or self.archive(dry_run)
        args = ["submit", "lim", str(archive), "--owner", owner] + (["--late"] if late else [])
        return run_cli(*args, home=self.path)

    def accepted(self, **kw) -> tuple[int, str]:
        proc = self.submit(**kw)
        assert proc.returncode == 0, proc.stderr
        return int(proc.stdout), proc.stderr.strip()

    def spooled(self) -> list[Path]:
        return sorted(self.path.glob("spool/*/*"))

    def end(self, entry_id: int, outcome: str) -> None:
        """Take an entry to `outcome` as the stages would: scored, failed (at prep) or dry-run."""
        self.queue.claim_next(only=entry_id)
        stage = {"scored": "score", "failed": "prep", "dry-run": "quiz"}[outcome]
        run = self.queue.start_stage(entry_id, stage, 0)
        self.queue.finish_stage(run, outcome, "done", {}, outcome=outcome,
                                reason="setup-error" if outcome == "failed" else None,
                                scores={"score": 0.5} if outcome == "scored" else None)


def test_submit_prints_the_id_alone_and_the_places_left_on_stderr(tmp_path):
    home = Home(tmp_path, limit=2)
    proc = home.submit()
    assert proc.returncode == 0 and proc.stdout == "1\n"
    assert proc.stderr == "1 scored entry remains for alice\n"
    proc = home.submit()
    assert proc.stdout == "2\n" and proc.stderr == "0 scored entries remain for alice\n"


def test_the_limit_refuses_in_one_sentence_and_stores_nothing(tmp_path):
    home = Home(tmp_path, limit=2)
    home.accepted()
    home.accepted()  # both still queued: they count, since they may yet be scored
    entries, spooled = home.queue.entries(), home.spooled()
    proc = home.submit()
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr == ("vmjudge: alice has used the 2 scored entries allowed for lim (0 scored, 2 still being "
                           "evaluated): an entry that ends without a score gives its place back, and a dry run "
                           "(an entry holding DRYRUN) is always accepted.\n")
    assert home.queue.entries() == entries and home.spooled() == spooled


def test_entries_that_end_unscored_give_their_place_back(tmp_path, monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(db_module.time, "time", lambda: clock[0])
    home = Home(tmp_path, limit=2)
    a, _ = home.accepted()
    b, _ = home.accepted()
    home.end(a, "scored")
    home.end(b, "failed")
    c, said = home.accepted()
    assert said == "0 scored entries remain for alice"
    home.queue.claim_next(only=c)  # running counts too
    refused = home.submit()
    assert refused.returncode == 1 and "(1 scored, 1 still being evaluated)" in refused.stderr
    for attempt in range(MAX_INFRA_ATTEMPTS):  # the infrastructure fails it until it is parked
        if attempt:
            clock[0] += RETRY_DELAYS[attempt - 1]
            home.queue.claim_next(only=c)
        run = home.queue.start_stage(c, "prep", 0)
        home.queue.infra_failure(run, "vm-start", "the VM would not start", {})
    assert home.queue.entry(c).state == "parked"
    d, _ = home.accepted()
    home.end(d, "dry-run")
    e, said = home.accepted()
    assert said == "0 scored entries remain for alice"
    assert home.submit().returncode == 1


def test_a_dry_run_is_accepted_at_the_limit_and_never_counts(tmp_path):
    home = Home(tmp_path, limit=1)
    first, _ = home.accepted()
    dry, said = home.accepted(dry_run=True)
    assert said == "a dry run does not count: 0 scored entries remain for alice"
    assert home.queue.entry(dry).dry_run and not home.queue.entry(first).dry_run
    home.end(first, "failed")
    _, said = home.accepted()  # the dry run, still queued, takes no place
    assert said == "0 scored entries remain for alice"


def test_owners_and_boards_are_counted_apart(tmp_path):
    home = Home(tmp_path, limit=1)
    home.accepted(owner="alice")
    assert home.submit(owner="alice").returncode == 1
    _, said = home.accepted(owner="alice", late=True)
    assert said == "0 scored entries remain for alice on the late board"
    refused = home.submit(owner="alice", late=True)
    assert refused.returncode == 1 and "allowed for late entries to lim (0 scored, 1 still" in refused.stderr
    _, said = home.accepted(owner="bob")
    assert said == "0 scored entries remain for bob"


def test_without_a_limit_submit_says_nothing_more(tmp_path):
    home = Home(tmp_path, limit=None)
    for _ in range(3):
        _, said = home.accepted()
        assert said == ""


def test_simultaneous_submissions_cannot_share_the_last_place(tmp_path):
    home = Home(tmp_path, limit=2)
    archives = [home.archive() for _ in range(8)]
    with concurrent.futures.ThreadPoolExecutor(len(archives)) as pool:
        procs = list(pool.map(lambda path: home.submit(archive=path), archives))
    assert sorted(p.returncode for p in procs) == [0, 0] + [1] * 6
    assert len(home.queue.entries()) == 2 and len(home.spooled()) == 2


def test_simultaneous_submissions_on_eight_hosts_sharing_postgresql_accept_exactly_two(tmp_path, pg_url):
    """Eight processes, each a host of its own (its own home, spool and lock file), submit at
    once to one PostgreSQL queue: only the database's transaction can keep the limit."""
    homes = [Home(tmp_path / f"host{i}", limit=2, url=pg_url, host=f"host{i}") for i in range(8)]
    archives = [home.archive() for home in homes]
    with concurrent.futures.ThreadPoolExecutor(len(homes)) as pool:
        procs = list(pool.map(lambda pair: pair[0].submit(archive=pair[1]), zip(homes, archives, strict=True)))
    assert sorted(p.returncode for p in procs) == [0, 0] + [1] * 6, [p.stderr for p in procs]
    refused = [p.stderr for p in procs if p.returncode == 1]
    assert all("alice has used the 2 scored entries allowed for lim (0 scored, 2 still being evaluated)" in e
               for e in refused), refused
    entries = homes[0].queue.entries()
    assert len(entries) == 2 and all(homes[0].queue.blobs.has(e.archive_sha256) for e in entries)
    assert sum(len(home.spooled()) for home in homes) == 2  # a refused host keeps nothing


@pytest.mark.parametrize("names, expected", [
    (["setup.sh", "DRYRUN"], True),
    (["./DRYRUN"], True),
    (["DRYRUN/"], True),
    (["DRYRUN/notes.txt"], True),
    (["./", "./sub/DRYRUN"], False),
    (["DRYRUN.txt", "xDRYRUN", "dryrun"], False),
])
def test_dry_runs_are_recognised_as_the_quiz_stage_finds_them(names, expected):
    assert declares_dry_run(names) is expected


def test_a_queue_made_before_entry_limits_gains_the_dry_run_column(tmp_path):
    path = tmp_path / "queue.db"
    old = Queue(path)
    old.add_challenge("lim", tmp_path, "key")
    entry_id = old.add_entry("lim", "alice", False, "ab" * 32, "a-entry.zip", Path("/spool/a.zip"))
    with sqlite3.connect(path) as db:
        db.execute("ALTER TABLE entries DROP COLUMN dry_run")
    queue = Queue(path)
    assert queue.entry(entry_id).dry_run is False
    assert queue.owner_usage("lim", "alice", False) == Usage(0, 1, 0.0, last_hour=1, waiting=1)


@pytest.mark.parametrize("owner, name", [("alice\nbob 1.0 first", "e-entry.tar.gz"),
                                         ("\u202eecila", "e-entry.tar.gz"), ("x" * 65, "e-entry.tar.gz"),
                                         ("alice", "e\n1 999-entry.tar.gz"), ("alice", "e\x1b[2J-entry.tar.gz"),
                                         ("alice", b"e\xff-entry.tar.gz")])
def test_names_that_would_forge_lines_or_act_on_a_terminal_are_refused_and_nothing_is_stored(tmp_path, owner, name):
    home = Home(tmp_path, limit=None)
    source = home.archive()
    archive = Path(os.fsdecode(os.path.join(os.fsencode(home.archives), name if isinstance(name, bytes)
                                            else os.fsencode(name))))
    source.rename(archive)
    proc = home.submit(owner=owner, archive=archive)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "is not allowed: use at most" in proc.stderr and "\x1b" not in proc.stderr
    assert home.queue.entries() == [] and home.spooled() == []
