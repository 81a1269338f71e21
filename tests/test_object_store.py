"""The object store of hosts that share no files ([storage], queue/object_store.py and blobs.py),
against a real S3-speaking server started for the tests (tests/s3_server.py: moto's server on
loopback): blobs go there and back checked against their sha256, stored once, a damaged object is
refused and never placed, a store that is down or slow is the judge's failure in one sentence
within a bounded time, and with several hosts on PostgreSQL the database keeps only the rows."""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import replace
from pathlib import Path

import boto3
import pytest

from vmjudge.config.storage import StorageSite
from vmjudge.errors import InfrastructureError, VmjudgeError
from vmjudge.queue import object_store, results
from vmjudge.queue.db import Queue
from vmjudge.queue.object_store import stored
from vmjudge.queue.spool import Spool
from vmjudge.supervisor.attempts import Recorder, attempt

from .s3_server import HoldingProxy, s3_server

MIB = 1 << 20


def s3_client(endpoint: str):
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="judge",
                        aws_secret_access_key="judge-secret")


def make_storage(endpoint: str, tmp_path: Path, **changes) -> StorageSite:
    """[storage] for a fresh bucket on `endpoint`, the credentials in a file only this user may read;
    each host gives it a cache directory of its own (on_host)."""
    bucket = "t-" + hashlib.sha256(str(tmp_path).encode()).hexdigest()[:20]
    s3_client(endpoint).create_bucket(Bucket=bucket)
    secret = tmp_path / "s3-credentials"
    secret.write_text("judge\njudge-secret\n")
    secret.chmod(0o600)
    return StorageSite(url=f"s3://{bucket}/contest", endpoint=endpoint, credentials_file=secret, **changes)


def on_host(storage: StorageSite, tmp_path: Path, host: str, location=None) -> Queue:
    """Host `host`'s view of the queue every host shares (one SQLite file unless `location`), with
    its own cache."""
    root = tmp_path / host
    root.mkdir(exist_ok=True)
    return Queue(location or tmp_path / "queue.db", host=host,
                 stored=stored(replace(storage, cache_dir=root / "cache")))


def blob(tmp_path: Path, data: bytes, name: str = "entry.zip") -> tuple[str, Path]:
    path = tmp_path / name
    path.write_bytes(data)
    return hashlib.sha256(data).hexdigest(), path


def objects(storage: StorageSite) -> dict[str, int]:
    listed = s3_client(storage.endpoint).list_objects_v2(Bucket=storage.bucket).get("Contents", [])
    return {o["Key"]: o["Size"] for o in listed}


def placed(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


def one_sentence(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text and text.endswith(".") and "Traceback" not in text, text
    return text


def test_a_blob_larger_than_a_part_goes_to_the_store_and_back_checked(s3, tmp_path):
    storage = make_storage(s3.endpoint, tmp_path)
    a, b = on_host(storage, tmp_path, "a"), on_host(storage, tmp_path, "b")
    data = os.urandom(2 * MIB + 12345)  # more than two of the database's parts
    sha, path = blob(tmp_path, data)
    a.blobs.put(sha, path)
    assert objects(storage) == {f"contest/sha256/{sha[:2]}/{sha}": len(data)}
    there = tmp_path / "b" / "spool"
    there.mkdir()
    copy = b.blobs.fetch(sha, there / f"{sha}.zip")
    assert copy.read_bytes() == data and copy.stat().st_mode & 0o777 == 0o600
    with b.database.connect() as db:
        assert [tuple(r) for r in db.execute("SELECT size, parts FROM blobs").fetchall()] == [(len(data), 0)]


def test_a_large_upload_goes_in_parts_streamed_from_the_file(s3, tmp_path, monkeypatch):
    monkeypatch.setattr(object_store, "MULTIPART", 5 * MIB)  # S3's smallest part
    storage = make_storage(s3.endpoint, tmp_path)
    a, b = on_host(storage, tmp_path, "a"), on_host(storage, tmp_path, "b")
    a.blobs.store.transfer.multipart_threshold = a.blobs.store.transfer.multipart_chunksize = 5 * MIB
    data = os.urandom(11 * MIB)
    sha, path = blob(tmp_path, data)
    a.blobs.put(sha, path)
    head = s3_client(s3.endpoint).head_object(Bucket=storage.bucket, Key=a.blobs.store.key(sha))
    assert head["ETag"].strip('"').endswith("-3")  # a multipart upload of three parts
    assert b.blobs.fetch(sha, tmp_path / "b" / "copy").read_bytes() == data


def test_the_same_bytes_are_stored_once_whoever_sends_them(s3, tmp_path):
    storage = make_storage(s3.endpoint, tmp_path)
    a, b = on_host(storage, tmp_path, "a"), on_host(storage, tmp_path, "b")
    sha, path = blob(tmp_path, b"the same archive" * 1000)
    assert a.blobs.store.put(sha, path) is True
    assert b.blobs.store.put(sha, path) is False  # there already: not sent again
    b.blobs.put(sha, path)
    assert list(objects(storage)) == [a.blobs.store.key(sha)]


def test_a_damaged_object_is_refused_and_nothing_is_placed(s3, tmp_path, pg_url):
    storage = make_storage(s3.endpoint, tmp_path)
    a, b = on_host(storage, tmp_path, "a", pg_url), on_host(storage, tmp_path, "b", pg_url)
    data = os.urandom(MIB + 1)
    sha, path = blob(tmp_path, data)
    a.blobs.put(sha, path)
    damaged = bytearray(data)
    damaged[MIB] ^= 1  # one bit, same size: only the hash can tell
    s3_client(s3.endpoint).put_object(Bucket=storage.bucket, Key=a.blobs.store.key(sha), Body=bytes(damaged))
    spool = Spool(tmp_path / "b" / "spool")
    with pytest.raises(InfrastructureError, match="is damaged .* so it was refused") as caught:
        spool.local_copy(b.blobs, sha, "entry.zip")
    assert caught.value.reason == "store-damaged" and sha[:12] in one_sentence(caught.value)
    assert placed(spool.root / sha[:2]) == []  # neither the archive nor a partial copy
    home = tmp_path / "b-home"
    with pytest.raises(InfrastructureError, match="is damaged") as caught:  # stage 3's results alike: never scored
        results.fetch(b, home, sha)
    assert caught.value.reason == "store-damaged" and placed(results.store_dir(home)) == []


def test_stage_4_with_the_store_down_is_the_judges_failure_not_a_setup_problem(tmp_path, pg_url):
    with s3_server(tmp_path / "moto.log") as server:
        storage = make_storage(server.endpoint, tmp_path, timeout=1.0, attempts=1)
        a, b = on_host(storage, tmp_path, "a", pg_url), on_host(storage, tmp_path, "b", pg_url)
        home_a, home_b = tmp_path / "a" / "home", tmp_path / "b" / "home"
        digest = results.put(home_a, b'{"answers":{},"format":1}')
        results.share(a, home_a, digest)  # stage 3 on a
        server.kill()
        with pytest.raises(InfrastructureError) as caught:  # stage 4 on b
            results.fetch(b, home_b, digest)
    assert caught.value.reason == "store-unavailable" and placed(results.store_dir(home_b)) == []


def test_a_hosts_copies_are_bounded_and_one_removed_is_fetched_again(s3, tmp_path):
    storage = make_storage(s3.endpoint, tmp_path, cache_bytes=MIB + MIB // 2)
    a, b = on_host(storage, tmp_path, "a"), on_host(storage, tmp_path, "b")
    clock = [1000.0]
    b.blobs.cache.clock = lambda: clock[0]  # its grace (an hour) passed by hand
    first, second = (blob(tmp_path, os.urandom(MIB), f"{n}.zip") for n in ("first-entry", "second-entry"))
    for sha, path in (first, second):
        a.blobs.put(sha, path)
    spool = Spool(tmp_path / "b" / "spool")

    def here() -> list[str]:
        return sorted(p.name for p in spool.root.rglob("*.zip"))

    spool.local_copy(b.blobs, first[0], "entry.zip")
    clock[0] += 3601
    spool.local_copy(b.blobs, second[0], "entry.zip")  # 2 MiB kept: the least recently used goes
    assert here() == [f"{second[0]}.zip"]
    assert b.blobs.cache.kept() == (1, MIB)
    clock[0] += 3601
    again = spool.local_copy(b.blobs, first[0], "entry.zip")  # needed again: fetched again
    assert again.read_bytes() == first[1].read_bytes() and here() == [f"{first[0]}.zip"]
    clock[0] += 10
    spool.local_copy(b.blobs, first[0], "entry.zip")  # there: used, not fetched
    assert b.blobs.cache.kept() == (1, MIB)


def test_a_stopped_store_is_the_judges_failure_quickly_in_one_sentence(tmp_path):
    with s3_server(tmp_path / "moto.log") as server:
        storage = make_storage(server.endpoint, tmp_path, timeout=1.0, attempts=2)
        a, b = on_host(storage, tmp_path, "a"), on_host(storage, tmp_path, "b")
        sha, path = blob(tmp_path, os.urandom(MIB))
        a.blobs.put(sha, path)
        server.kill()
        there = tmp_path / "b" / "spool"
        there.mkdir()
        started = time.monotonic()
        with pytest.raises(InfrastructureError) as caught:
            b.blobs.fetch(sha, there / "copy.zip")
        assert time.monotonic() - started < 10
        assert caught.value.reason == "store-unavailable"
        assert "did not answer in time" in one_sentence(caught.value) and "after 2 tries of 1 s" in str(caught.value)
        assert placed(there) == []
        other, other_path = blob(tmp_path, b"another archive", "other.zip")
        with pytest.raises(InfrastructureError, match="did not answer in time"):
            a.blobs.put(other, other_path)
        with a.database.connect() as db:  # no row for a blob the store does not have
            assert db.execute("SELECT 1 FROM blobs WHERE sha256 = ?", (other,)).fetchone() is None


def test_a_slow_store_is_given_up_within_a_bounded_time(s3, tmp_path):
    port = int(s3.endpoint.rsplit(":", 1)[1])
    proxy = HoldingProxy(("127.0.0.1", port))
    try:
        storage = make_storage(s3.endpoint, tmp_path, timeout=1.0, attempts=2)
        slow = replace(storage, endpoint=proxy.endpoint)
        a, b = on_host(slow, tmp_path, "a"), on_host(slow, tmp_path, "b")
        sha, path = blob(tmp_path, os.urandom(MIB))
        a.blobs.put(sha, path)  # through the proxy, not yet holding: it works
        proxy.hold.set()
        there = tmp_path / "b" / "spool"
        there.mkdir()
        started = time.monotonic()
        with pytest.raises(InfrastructureError) as caught:
            b.blobs.fetch(sha, there / "copy.zip")
        took = time.monotonic() - started
        assert 1 <= took < 10, took  # two read timeouts of 1 s and a backoff, not a hang
        assert caught.value.reason == "store-unavailable" and "did not answer in time" in one_sentence(caught.value)
        assert proxy.held >= 2 and placed(there) == []
    finally:
        proxy.close()


def test_a_store_failure_in_a_stage_is_recorded_as_the_infrastructures_and_retried(tmp_path):
    """What the daemon does with it (supervisor/attempts.py): the stage queued again, the entry charged
    nothing; stage 1 fetches its archive as evaluate.py does."""
    with s3_server(tmp_path / "moto.log") as server:
        storage = make_storage(server.endpoint, tmp_path, timeout=1.0, attempts=1)
        queue = on_host(storage, tmp_path, "a")
        queue.add_challenge("c", tmp_path, "key")
        sha, path = blob(tmp_path, os.urandom(1000), "alice-entry.zip")
        queue.blobs.put(sha, path)
        eid = queue.add_entry("c", "alice", False, sha, path.name, path)
        server.kill()
        run = queue.start_stage(queue.claim_next().id, "prep", 0)
        spool = Spool(tmp_path / "elsewhere-spool")
        assert attempt(queue, run, "a", Recorder(None),
                       lambda: spool.local_copy(queue.blobs, sha, path.name)) is None
    entry = queue.entry(eid)
    [stage_run] = queue.stage_runs(eid)
    assert (entry.state, entry.stage, entry.outcome) == ("queued", "prep", None)
    assert (stage_run.status, stage_run.reason) == ("infra", "store-unavailable")


def test_several_hosts_on_postgresql_keep_only_rows_in_the_database(s3, tmp_path, pg_url):
    storage = make_storage(s3.endpoint, tmp_path)
    a = on_host(storage, tmp_path, "a", pg_url)
    b = on_host(storage, tmp_path, "b", pg_url)
    a.add_challenge("c", tmp_path, "key")
    data = os.urandom(3 * MIB)
    sha, path = blob(tmp_path, data, "alice-entry.zip")
    eid = a.add_entry("c", "alice", False, sha, path.name, path)  # the archive travels with the entry
    copy = Spool(tmp_path / "b" / "spool").local_copy(b.blobs, b.entry(eid).archive_sha256, path.name)
    assert copy.read_bytes() == data
    home_a, home_b = tmp_path / "a" / "home", tmp_path / "b" / "home"
    digest = results.put(home_a, b'{"answers":{},"format":1}')
    results.share(a, home_a, digest)  # stage 3 on a, stage 4 on b
    results.fetch(b, home_b, digest)
    assert (results.store_dir(home_b) / digest).read_bytes() == b'{"answers":{},"format":1}'
    with a.database.connect() as db:
        assert db.execute("SELECT count(*) AS n FROM blob_parts").fetchone()["n"] == 0
        rows = {r["sha256"]: (r["size"], r["parts"]) for r in db.execute("SELECT * FROM blobs").fetchall()}
    assert rows == {sha: (len(data), 0), digest: (25, 0)}
    assert set(objects(storage)) == {a.blobs.store.key(sha), a.blobs.store.key(digest)}


def test_blobs_stored_in_the_database_before_the_store_are_still_read_from_it(s3, tmp_path, pg_url):
    before = Queue(pg_url, host="a")  # several hosts without a store: the parts in PostgreSQL
    sha, path = blob(tmp_path, os.urandom(MIB + 7))
    before.blobs.put(sha, path)
    storage = make_storage(s3.endpoint, tmp_path)
    after = on_host(storage, tmp_path, "b", pg_url)
    assert after.blobs.fetch(sha, tmp_path / "b" / "copy").read_bytes() == path.read_bytes()
    assert objects(storage) == {}
    stored = after.blobs
    other, other_path = blob(tmp_path, b"stored with the store", "other.zip")
    stored.put(other, other_path)
    with pytest.raises(VmjudgeError, match="kept in the object store, but this host's site.toml has no"):
        before.blobs.fetch(other, tmp_path / "a-copy")  # a host left without [storage]
