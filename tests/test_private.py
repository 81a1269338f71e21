"""Other local users cannot read what the judge keeps (exam logs and archived results are
channels to the test labels; the spool and entry trees are participants' code), while
libvirt's qemu user can still cross to an entry's home disk. A home is made through the
real code paths, then every file and directory is tried as `nobody` and as `libvirt-qemu`.
No VM is started (the home disk is made by qemu-img, as prep makes it)."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from vmjudge.config import load_challenge, load_site
from vmjudge.queue.db import Queue
from vmjudge.queue.results import encode, put
from vmjudge.queue.spool import Spool
from vmjudge.reports import report
from vmjudge.stages.context import StageContext
from vmjudge.stages.prep import stage as prep
from vmjudge.vm.channel import CommandResult
from vmjudge.vm.runner import make_blank_disk

from .needs import cannot_run
from .test_spool import make_tar

QEMU_USER = "libvirt-qemu"

# Run as another user: for each (how, path), "ok" or the error's name.
PROBE = """
import json, os, sys
def probe(how, path):
    try:
        if how == "read":
            with open(path, "rb") as f:
                f.read(1)
        elif how == "list":
            os.listdir(path)
        else:
            os.stat(path)
        return "ok"
    except OSError as exc:
        return type(exc).__name__
print(json.dumps([probe(how, path) for how, path in json.loads(sys.argv[1])]))
"""


def as_user(user: str, probes: list[tuple[str, Path]]) -> dict[tuple[str, Path], str]:
    if os.geteuid() != 0:
        cannot_run("trying files as another user needs root")
    try:
        account = pwd.getpwnam(user)
    except KeyError:
        cannot_run(f"no user {user} on this host")
    proc = subprocess.run(["setpriv", f"--reuid={account.pw_uid}", f"--regid={account.pw_gid}", "--init-groups",
                           sys.executable, "-I", "-c", PROBE, json.dumps([(h, str(p)) for h, p in probes])],
                          capture_output=True, text=True, cwd="/", check=True, timeout=300)
    return dict(zip(probes, json.loads(proc.stdout), strict=True))


@pytest.fixture
def crossable_tmp():
    """A temporary directory other users may cross (pytest's own are 0700, which would hide
    everything below and prove nothing)."""
    path = Path(tempfile.mkdtemp(prefix="vmjudge-private-", dir="/var/tmp"))
    os.chmod(path, 0o711)
    yield path
    shutil.rmtree(path)


def judged_home(root: Path):
    """A home holding one entry that went through every writer of the judge: the spool, the
    queue, prep's unpacked tree and install tree, the home disk, the logs, the results archive
    and the HTML report."""
    challenge = root / "c"
    challenge.mkdir()
    (challenge / "challenge.toml").write_text('name = "c"\n')
    site = load_site(root / "home")
    site.layout.ensure()
    queue = Queue(site.layout.queue_db)
    queue.add_challenge("c", challenge, "key")
    archive = make_tar(root / "alice-entry.tar.gz", {"setup.sh": b"true\n", "next.sh": b"echo N\n",
                                                     "answers.txt": b"r1,N\n"})
    stored = Spool(site.layout.spool).store(archive)
    entry_id = queue.add_entry("c", "alice", False, stored.sha256, archive.name, stored.path)
    ctx = StageContext(site=site, challenge=load_challenge(challenge), image=None,
                       entry=queue.entry(entry_id), attempt=1)
    prep.unpack_entry(ctx)
    prep.set_aside_submitted_answers(ctx)
    make_blank_disk(ctx.home_disk, 16)
    for stage in ("prep", "quiz", "exam"):
        with ctx.stage_log(stage) as log:
            cmd = CommandResult(index=0, name="next.sh t1", status="ok")
            log.started(cmd)
            log.output(cmd, f"t1,A  <- {stage} output\n".encode())
            log.ended(cmd)
    digest = put(site.home, encode(("t1",), {"t1": "ok"}, "answer-lines", answers={"t1": "A"}))
    report.write_html(queue, site, entry_id)
    return site, queue, ctx, stored, digest


def test_nothing_the_judge_keeps_is_readable_by_other_users_and_qemu_can_still_cross(crossable_tmp):
    site, queue, ctx, stored, digest = judged_home(crossable_tmp)
    home, results = site.home, ctx.results_dir
    keep_open = sqlite3.connect(queue.database.path)  # the -wal and -shm files exist while a connection is open
    try:
        keep_open.execute("SELECT COUNT(*) FROM entries").fetchone()
        queue.add_entry("c", "bob", False, stored.sha256, "bob-entry.tar.gz", stored.path)  # something in the WAL
        db = queue.database.path
        written = [db, Path(f"{db}-wal"), Path(f"{db}-shm"), Path(f"{db}-writers"), stored.path,
                   home / "archive" / "sha256" / digest, results / "prep.log", results / "quiz.log",
                   results / "exam.log", results / "report.html"]
        for path in written:
            assert path.is_file() and stat.S_IMODE(path.stat().st_mode) == 0o600, path
        # The entry's own files keep the modes it gave them (an executable next.sh runs directly);
        # their directories keep everyone else out.
        secret_files = written + [ctx.entry_dir / "answers.txt", ctx.entry_dir / "next.sh",
                                  results / "install" / "next.sh"]
        closed_dirs = [home / "spool", stored.path.parent, home / "archive", home / "archive" / "sha256",
                       ctx.entry_dir, results / "install"]
        crossable_dirs = [home, home / "results", results]
        probes = ([("read", p) for p in secret_files] + [("list", d) for d in closed_dirs + crossable_dirs]
                  + [("stat", d / "x") for d in closed_dirs] + [("stat", ctx.home_disk)])
        for user in ("nobody", QEMU_USER):
            seen = as_user(user, probes)
            for path in secret_files:
                assert seen["read", path] == "PermissionError", (user, path, seen["read", path])
            for d in closed_dirs + crossable_dirs:
                assert seen["list", d] == "PermissionError", (user, d)
            for d in closed_dirs:  # not even crossed: a guessed name is not found, it is refused
                assert seen["stat", d / "x"] == "PermissionError", (user, d)
            # What qemu needs: results/ID can be crossed to the home disk prep made.
            assert seen["stat", ctx.home_disk] == "ok", user
    finally:
        keep_open.close()


def test_a_home_made_by_an_older_vmjudge_is_closed_when_next_used(tmp_path):
    site = load_site(tmp_path / "home")
    for d in ("spool", "archive", "results"):
        (site.home / d).mkdir(parents=True)
        os.chmod(site.home / d, 0o755)
    db = site.home / "queue.db"
    older = sqlite3.connect(db)  # as SQLite makes them by default: 0644, and so its -wal and -shm
    try:
        older.execute("PRAGMA journal_mode=WAL")
        older.execute("CREATE TABLE t (x)")
        assert stat.S_IMODE(Path(f"{db}-wal").stat().st_mode) == 0o644
        site.layout.ensure()
        Queue(db)
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in site.home.iterdir()}
    finally:
        older.close()
    assert modes == {"spool": 0o700, "archive": 0o700, "results": 0o711, "run": 0o711, "images": 0o755,
                     "queue.db": 0o600, "queue.db-wal": 0o600, "queue.db-shm": 0o600, "queue.db-writers": 0o600}
