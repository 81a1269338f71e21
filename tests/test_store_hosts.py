"""Hosts that share no files, with an object store (#57), for real: three homes of their own on one
PostgreSQL queue and one S3 server (moto's, tests/s3_server.py), real VMs on one libvirt.

Each record set's data disk is made by the first host's `challenge add` and fetched from the store
by the others'. An entry submitted on host A is judged on host B (its archive fetched from the store, its stage-3
results put there) and scored again on host C, which holds none of its files (its results fetched
from the store); PostgreSQL holds the blobs' rows and no byte of them. Meanwhile the store is stopped
(SIGSTOP: it takes connections and answers none) in the middle of another entry's exam: the stage is
the judge's failure, run again once the store is back, and the entry scores as the first. A third
entry's archive is damaged in the store before any host fetched it: refused each time, never
unpacked, parked for the organiser after the policy's three tries.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import boto3

from vmjudge.queue.db import Queue
from vmjudge.vm import domain

from .hostile.cases import tar_of
from .s3_server import s3_server
from .test_daemon import QUICK, QUICK_SCORE, own_domains, wait_until
from .test_pipeline import REPO, vmjudge


def make_home(site, pg_url: str, host: str, endpoint: str, bucket: str, secret: Path) -> Path:
    home = Path(tempfile.mkdtemp(prefix=f"store-{host}-", dir=site.home))
    os.chmod(home, 0o711)
    (home / "images").symlink_to(site.layout.images)  # the same image bits on each, as `image import` gives
    (home / "site.toml").write_text(
        f'[queue]\nurl = "{pg_url}"\nhost = "{host}"\nlease_seconds = 10\ngrace_seconds = 20\n'
        f'[storage]\nurl = "s3://{bucket}/contest"\nendpoint = "{endpoint}"\ncredentials_file = "{secret}"\n'
        "timeout_seconds = 1\nattempts = 1\n")
    return home


def test_an_entry_submitted_judged_and_scored_on_three_hosts_through_the_store(site, image, conn, pg_url, tmp_path):
    bucket = "hosts-" + hashlib.sha256(str(tmp_path).encode()).hexdigest()[:16]
    secret = tmp_path / "s3-credentials"
    secret.write_text("judge\njudge-secret\n")
    secret.chmod(0o600)
    homes: list[Path] = []
    with s3_server(tmp_path / "moto.log") as server:
        s3 = boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1", aws_access_key_id="judge",
                          aws_secret_access_key="judge-secret")
        s3.create_bucket(Bucket=bucket)
        a, b, c = homes[:] = [make_home(site, pg_url, h, server.endpoint, bucket, secret) for h in ("A", "B", "C")]
        try:
            said = [vmjudge(home, "challenge", "add", str(QUICK)).stderr for home in (a, b, c)]
            # The record sets' data disks: made on A, sent to the store, fetched by B and C (the same bytes).
            assert [len(re.findall(r"data disk \w+ for \w+/ made", text)) for text in said] == [2, 0, 0], said
            assert [len(re.findall(r"data disk \w+ for \w+/ fetched", text)) for text in said] == [0, 2, 2], said
            disks = [{p.name: p.read_bytes() for p in (home / "data-disks").glob("*.iso")} for home in (a, b, c)]
            assert len(disks[0]) == 2 and disks[0] == disks[1] == disks[2]
            ids = {}
            for name, notes in (("first", b"1"), ("stopped", b"2"), ("damaged", b"3")):
                archive = tar_of({"notes.txt": notes}, tmp_path / f"{name}-entry.tar.gz")
                ids[name] = int(vmjudge(a, "submit", "hostile", str(archive), "--owner", name).stdout)
            queue = Queue(pg_url, host="observer")
            damaged = queue.entry(ids["damaged"]).archive_sha256
            key = f"contest/sha256/{damaged[:2]}/{damaged}"
            body = bytearray(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
            body[len(body) // 2] ^= 1  # one bit, the same size: only its sha256 tells
            s3.put_object(Bucket=bucket, Key=key, Body=bytes(body))
            log = open(b / "daemon.log", "ab")  # noqa: SIM115 - B's stderr, read when the test fails
            daemon = subprocess.Popen([sys.executable, "-m", "vmjudge.cli", "daemon", "--until-idle", "-q"],
                                      cwd=REPO, env={**os.environ, "VMJUDGE_HOME": str(b)}, stdout=subprocess.DEVNULL,
                                      stderr=log)

            def quiz_passed():
                """Stopped then, the store is down for the whole exam that follows, whose results go to it at
                its end: the exam (a few seconds) is too short to stop the store reliably once it runs."""
                return daemon.poll() is None and any((r.stage, r.status) == ("quiz", "passed")
                                                     for r in queue.stage_runs(ids["stopped"]))
            wait_until(quiz_passed, 900, "host B to pass the quiz of the entry whose store is stopped")
            server.process.send_signal(signal.SIGSTOP)
            try:
                wait_until(lambda: any((r.stage, r.reason) == ("exam", "store-unavailable")
                                       for r in queue.stage_runs(ids["stopped"])), 300,
                           "the exam to fail as the judge's, the store not answering")
            except AssertionError as exc:
                raise AssertionError(f"{exc}: {queue.stage_runs(ids['stopped'])}\n"
                                     + (b / "daemon.log").read_text(errors="replace")[-3000:]) from None
            finally:
                server.process.send_signal(signal.SIGCONT)
            assert daemon.wait(timeout=1200) == 0, (b / "daemon.log").read_text(errors="replace")[-3000:]
            first, stopped = queue.entry(ids["first"]), queue.entry(ids["stopped"])
            assert (first.state, first.outcome, stopped.state, stopped.outcome) == ("done", "scored", "done", "scored")
            for entry_id in (ids["first"], ids["stopped"]):
                [scoring] = queue.scorings(entry_id)
                assert scoring.scores["score"] == QUICK_SCORE
            exams = [(r.status, r.reason) for r in queue.stage_runs(ids["stopped"]) if r.stage == "exam"]
            assert exams[0] == ("infra", "store-unavailable") and exams[-1][0] == "passed", exams
            spoiled = queue.entry(ids["damaged"])
            assert (spoiled.state, spoiled.stage) == ("parked", "prep")
            tries = [(r.status, r.reason) for r in queue.stage_runs(ids["damaged"])]
            # Refused each time it was fetched (a try while the store was stopped is store-unavailable).
            assert len(tries) == 3 and ("infra", "store-damaged") in tries and \
                set(tries) <= {("infra", "store-damaged"), ("infra", "store-unavailable")}, tries
            assert not (b / "results" / str(ids["damaged"]) / "entry").exists()  # never unpacked
            assert not any((b / "spool").rglob(f"{damaged}*"))  # nor placed
            # Scored again on C, which has none of the entry's files: its results come from the store.
            held = c / "archive" / "sha256"
            assert not held.is_dir() or not any(held.iterdir())
            vmjudge(c, "rescore", "hostile", "--entries", str(ids["first"]))
            official, rescored = queue.scorings(ids["first"])
            assert (rescored.why, rescored.results_sha256, rescored.scores["score"]) == \
                ("rescore", official.results_sha256, QUICK_SCORE)
            assert (held / official.results_sha256).is_file()  # fetched from the store, checked, kept
            with queue.database.connect() as db:  # the rows, and not a byte of the blobs
                assert db.execute("SELECT count(*) AS n FROM blob_parts").fetchone()["n"] == 0
                parts = {r["parts"] for r in db.execute("SELECT parts FROM blobs").fetchall()}
            assert parts == {0}
        finally:
            for home in homes:
                assert own_domains(conn, home) == [], (home / "daemon.log").read_text(errors="replace")[-3000:] \
                    if (home / "daemon.log").exists() else home
            subprocess.run(["rm", "-rf", *map(str, homes)], check=True, timeout=300)
    assert domain.leftover_domains(conn) == []
