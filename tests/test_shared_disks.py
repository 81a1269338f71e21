"""Data disks kept in the object store (#57, queue/shared_disks.py), against the real S3-speaking
server of tests/s3_server.py and PostgreSQL: the first host to make a set's disk sends it, another
host fetches it instead of making it (the same bytes), a damaged object is refused, the disk made
from the host's files instead and sent over it, and a store that is down costs a host only the making of its disk."""

from __future__ import annotations

import hashlib
import logging

from vmjudge.images import data_disk
from vmjudge.images.data_disk import DataDisks
from vmjudge.queue.db import Queue
from vmjudge.queue.shared_disks import shared_disks

from .s3_server import s3_server
from .test_data_disk import listing, record_set
from .test_object_store import make_storage, objects, on_host, s3_client


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def never_made(monkeypatch):
    """The disk's writer, refused: a host that makes a disk rather than fetch it fails the test."""
    def refused(*args, **kwargs):
        raise AssertionError("the disk was made on this host, not fetched from the store")
    monkeypatch.setattr(data_disk, "write_iso", refused)


def test_a_disk_one_host_made_is_fetched_by_the_next_with_the_same_bytes(s3, tmp_path, pg_url, monkeypatch):
    storage = make_storage(s3.endpoint, tmp_path)
    a, b = on_host(storage, tmp_path, "a", pg_url), on_host(storage, tmp_path, "b", pg_url)
    files = record_set(tmp_path, size=300_000)
    with DataDisks(tmp_path / "a" / "disks", shared_disks(a.blobs)).held("test", files) as made:
        assert made.how == "made"
        sent = sha256(made.path)
    assert objects(storage) == {a.blobs.store.key(sent): made.path.stat().st_size}
    with a.database.connect() as db:  # PostgreSQL keeps the row only
        assert [tuple(r.values()) for r in db.execute("SELECT key, sha256 FROM data_disks").fetchall()] == \
            [(made.key, sent)]
    never_made(monkeypatch)
    with DataDisks(tmp_path / "b" / "disks", shared_disks(b.blobs)).held("test", files) as fetched:
        assert (fetched.key, fetched.how, sha256(fetched.path)) == (made.key, "fetched", sent)
        assert oct(fetched.path.stat().st_mode & 0o777) == oct(data_disk.DISK_MODE)
        assert listing(fetched.path) == listing(made.path)
    assert list((tmp_path / "b" / "disks" / data_disk.WORK).iterdir()) == []  # nothing half fetched is left


def test_a_damaged_disk_in_the_store_is_refused_and_made_from_the_files(s3, tmp_path, pg_url, caplog):
    storage = make_storage(s3.endpoint, tmp_path)
    a, b = on_host(storage, tmp_path, "a", pg_url), on_host(storage, tmp_path, "b", pg_url)
    files = record_set(tmp_path, size=300_000)
    with DataDisks(tmp_path / "a" / "disks", shared_disks(a.blobs)).held("test", files) as made:
        good = made.path.read_bytes()
    damaged = bytearray(good)
    damaged[len(good) // 2] ^= 1  # one bit, the same size: only the hash can tell
    key = a.blobs.store.key(hashlib.sha256(good).hexdigest())
    s3_client(s3.endpoint).put_object(Bucket=storage.bucket, Key=key, Body=bytes(damaged))
    with caplog.at_level(logging.WARNING, logger=data_disk.__name__), \
            DataDisks(tmp_path / "b" / "disks", shared_disks(b.blobs)).held("test", files) as disk:
        mine = disk.path.read_bytes()
    assert disk.how == "made" and mine != bytes(damaged) and listing(disk.path) == listing(made.path)
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "is made here from the challenge's files" in said and "is damaged" in said and key in said
    assert mine == good  # the same files make the same bytes, on any host
    body = s3_client(s3.endpoint).get_object(Bucket=storage.bucket, Key=key)["Body"].read()
    assert body == good  # sent over the damaged object: the next host fetches it


def test_a_store_that_is_down_costs_a_host_only_the_making_of_its_disk(tmp_path, pg_url, caplog):
    with s3_server(tmp_path / "moto.log") as server:
        storage = make_storage(server.endpoint, tmp_path, timeout=1.0, attempts=1)
        a = on_host(storage, tmp_path, "a", pg_url)
        server.kill()
        files = record_set(tmp_path)
        with caplog.at_level(logging.WARNING, logger=data_disk.__name__), \
                DataDisks(tmp_path / "a" / "disks", shared_disks(a.blobs)).held("test", files) as disk:
            assert disk.path.is_file()
    assert "was made but not sent to the object store" in caplog.text
    with a.database.connect() as db:  # nothing listed that the store does not hold
        assert db.execute("SELECT count(*) AS n FROM data_disks").fetchone()["n"] == 0


def test_without_a_store_each_host_makes_its_own(tmp_path):
    assert shared_disks(Queue(tmp_path / "queue.db").blobs) is None
