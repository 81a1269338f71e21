"""site.toml's [storage] (config/storage.py) and the store's credentials (queue/object_store.py):
each key read and checked, a store without a shared queue refused, and credentials taken only from a
file no one else may read, or from the environment. No server is needed: nothing here connects."""

from __future__ import annotations

import pytest

from vmjudge.config import load_site
from vmjudge.config.storage import GIB, StorageSite
from vmjudge.errors import ConfigError
from vmjudge.queue.blobs import Blobs
from vmjudge.queue.connection import open_database
from vmjudge.queue.object_store import ObjectStore, stored

QUEUE = '[queue]\nurl = "postgresql:///vmjudge"\n'


def site_with(tmp_path, text: str):
    (tmp_path / "site.toml").write_text(text)
    return load_site(tmp_path)


def test_every_key_is_read(tmp_path):
    storage = site_with(tmp_path, QUEUE + '[storage]\nurl = "s3://vmjudge-blobs/contest/2026"\n'
                        'endpoint = "http://127.0.0.1:9000"\nregion = "eu-west-3"\n'
                        'credentials_file = "/etc/vmjudge/s3"\ncache_gib = 2.5\ntimeout_seconds = 3\n'
                        'attempts = 4\n').storage
    assert (storage.bucket, storage.prefix, storage.endpoint, storage.region) == (
        "vmjudge-blobs", "contest/2026", "http://127.0.0.1:9000", "eu-west-3")
    assert (str(storage.credentials_file), storage.cache_bytes, storage.timeout, storage.attempts) == (
        "/etc/vmjudge/s3", int(2.5 * GIB), 3.0, 4)
    assert storage.cache_dir == tmp_path / "blob-cache"


def test_without_the_table_there_is_no_store(tmp_path):
    site = site_with(tmp_path, QUEUE)
    assert site.storage.url is None
    database = open_database(tmp_path / "queue.db")
    database.create()
    assert stored(site.storage) is None and Blobs(database).store is None


@pytest.mark.parametrize(("text", "refusal"), [
    ('[storage]\nurl = "s3://b-1/x"\n', r"\[storage\] url is set but \[queue\] url is not"),
    (QUEUE + '[storage]\nurl = "http://b-1/x"\n', r"\[storage\] url = 'http://b-1/x' is not allowed: use an S3 URL"),
    (QUEUE + '[storage]\nurl = "s3://B/x"\n', "is not allowed: use an S3 URL"),
    (QUEUE + '[storage]\nendpoint = "127.0.0.1:9000"\n', r"endpoint = .* is not allowed: use the S3-compatible"),
    (QUEUE + '[storage]\ncredentials_file = "s3-secret"\n', "credentials_file = .* use an absolute path"),
    (QUEUE + '[storage]\ncache_gib = 0\n', "cache_gib = 0 is not allowed"),
    (QUEUE + '[storage]\nbucket = "b"\n', r"\[storage\] has unknown key\(s\) bucket"),
])
def test_a_wrong_value_is_refused_in_one_sentence(tmp_path, text, refusal):
    with pytest.raises(ConfigError, match=refusal):
        site_with(tmp_path, text)


def storage_with(tmp_path, credentials=None) -> StorageSite:
    return StorageSite(url="s3://vmjudge/c", endpoint="http://127.0.0.1:9", credentials_file=credentials,
                       cache_dir=tmp_path / "cache")


def test_a_credentials_file_others_may_read_is_refused(tmp_path):
    secret = tmp_path / "s3"
    secret.write_text("judge\njudge-secret\n")
    secret.chmod(0o640)
    with pytest.raises(ConfigError, match="credentials file .* is not allowed: .*that no one else may read"):
        ObjectStore(storage_with(tmp_path, secret))
    secret.chmod(0o600)
    store = ObjectStore(storage_with(tmp_path, secret))
    assert store.client._request_signer._credentials.access_key == "judge"  # what the file says, nothing else
    secret.write_text("judge\n")
    with pytest.raises(ConfigError, match="access key id on its first line and the secret key on its second"):
        ObjectStore(storage_with(tmp_path, secret))


def test_without_a_file_the_environment_gives_the_credentials(tmp_path, monkeypatch):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID", raising=False)
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY", raising=False)
    with pytest.raises(ConfigError, match="no credentials_file and AWS_ACCESS_KEY_ID or AWS_SECRET_ACCESS_KEY"):
        ObjectStore(storage_with(tmp_path))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "from-env")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
    assert ObjectStore(storage_with(tmp_path)).client._request_signer._credentials.access_key == "from-env"
