"""The S3-compatible object store that hosts sharing no files keep their blobs in ([storage] url).

Each blob is an object named by its sha256 (PREFIX/sha256/ab/abcdef…), so the same bytes are
stored once whoever sends them, and a copy fetched is checked against its name before it is used
(blobs.py). boto3 speaks to the store: it is AWS's own client, kept in step with S3 and used
against every S3-compatible server; it is told the server's endpoint, path-style addressing (an
S3-compatible server rarely has a DNS name per bucket), and no checksums beyond what a request
needs (servers other than AWS differ in the newer ones; the sha256 is checked here anyway).

A store that is down or slow must never hang a stage nor be charged to an entry: every request
has connect and read timeouts of a few seconds and a few tries, a download must keep a minimum
rate, and whatever fails is raised as InfrastructureError in one sentence, so the stage is the
judge's failure and is run again. Credentials come from a file that only the daemon's user may
read, or from the environment; never from the client's own search (a metadata server included).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import boto3
from boto3.exceptions import S3UploadFailedError
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from ..config.storage import StorageSite
from ..errors import ConfigError, InfrastructureError
from ..files import CHUNK, DurableFile
from ..notify.secrets import read_private
from .blob_cache import BlobCache
from .blobs import Stored

# Larger uploads go in parts of this size, one at a time: memory holds one part's buffer at most.
MULTIPART = 64 << 20
# A download slower than this on average (after a read timeout's worth of grace) is given up:
# a store that trickles bytes would otherwise hold a stage for as long as it liked.
MIN_RATE = 256 << 10  # bytes a second
_MISSING = ("NoSuchKey", "404", "NotFound")
_REFUSED = ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403", "401")


class ObjectStore:
    """One bucket's blobs, through one boto3 client (thread-safe; the daemon's slots share it)."""

    def __init__(self, storage: StorageSite):
        key_id, secret = credentials(storage)
        self.storage, self.bucket, self.prefix = storage, storage.bucket, storage.prefix
        self.where = f"{storage.url} ({storage.endpoint})" if storage.endpoint else str(storage.url)
        config = Config(connect_timeout=storage.timeout, read_timeout=storage.timeout,
                        retries={"total_max_attempts": storage.attempts, "mode": "standard"},
                        s3={"addressing_style": "path"}, request_checksum_calculation="when_required",
                        response_checksum_validation="when_required")
        self.client = boto3.session.Session().client(
            "s3", endpoint_url=storage.endpoint, region_name=storage.region, aws_access_key_id=key_id,
            aws_secret_access_key=secret, config=config)
        self.transfer = TransferConfig(multipart_threshold=MULTIPART, multipart_chunksize=MULTIPART,
                                       use_threads=False)

    def key(self, sha256: str) -> str:
        name = f"sha256/{sha256[:2]}/{sha256}"
        return f"{self.prefix}/{name}" if self.prefix else name

    def has(self, sha256: str) -> bool:
        with self._speaking("look up", sha256):
            try:
                self.client.head_object(Bucket=self.bucket, Key=self.key(sha256))
            except ClientError as exc:
                # S3 answers 403 for a missing object to a key without s3:ListBucket: tried as missing, so the
                # put says whether the key may write.
                if _code(exc) in _MISSING or _code(exc) in ("403", "AccessDenied"):
                    return False
                raise
        return True

    def put(self, sha256: str, path: Path, again: bool = False) -> bool:
        """The file stored under its sha256 (which the caller computed as it wrote it), streamed
        from disk, unless the store has those bytes already (`again`: over an object found damaged);
        True when it was sent."""
        if not again and self.has(sha256):
            return False
        with self._speaking("store", sha256):
            self.client.upload_file(str(path), self.bucket, self.key(sha256), Config=self.transfer)
        return True

    def get(self, sha256: str, size: int, out: DurableFile) -> None:
        """The object's bytes written to `out` as they arrive (never whole in memory); the caller
        checks them against the sha256 before it places them."""
        deadline = time.monotonic() + self.storage.timeout * self.storage.attempts + size / MIN_RATE
        with self._speaking("fetch", sha256):
            body = self.client.get_object(Bucket=self.bucket, Key=self.key(sha256))["Body"]
            try:
                for chunk in body.iter_chunks(CHUNK):
                    out.write(chunk)
                    if time.monotonic() > deadline:
                        raise InfrastructureError("store-unavailable", (
                            f"the object store {self.where} sent blob {sha256[:12]} slower than "
                            f"{MIN_RATE >> 10} KiB/s: check the store and the network to it; the stage runs again "
                            "shortly."))
            finally:
                body.close()

    @contextmanager
    def _speaking(self, what: str, sha256: str) -> Iterator[None]:
        """What the client raises, as the one sentence an InfrastructureError carries."""
        try:
            yield
        except ClientError as exc:
            raise self._answered(what, sha256, exc) from None
        except S3UploadFailedError as exc:
            raise InfrastructureError("store-unavailable", (
                f"the object store {self.where} did not take blob {sha256[:12]} ({exc}): check the store and "
                "[storage] in site.toml; the stage runs again shortly.")) from None
        except BotoCoreError as exc:
            raise InfrastructureError("store-unavailable", (
                f"the object store {self.where} did not answer in time ({type(exc).__name__}) when asked to "
                f"{what} blob {sha256[:12]}, after {tries(self.storage.attempts)} of {self.storage.timeout:g} s each: "
                "check that it is running and reachable; the stage runs again shortly.")) from None

    def _answered(self, what: str, sha256: str, exc: ClientError) -> InfrastructureError:
        code = _code(exc)
        if code in _MISSING:
            return InfrastructureError("store-missing", (
                f"the object store {self.where} has no blob {sha256[:12]} though the queue lists it: put it back "
                "from a host that still has a copy, or run the entry again (`vmjudge rescore --rerun-stages`)."))
        if code == "NoSuchBucket":
            return InfrastructureError("store-refused", (
                f"the object store {self.where} has no bucket {self.bucket}: create it, or correct [storage] url in "
                "site.toml."))
        if code in _REFUSED:
            return InfrastructureError("store-refused", (
                f"the object store {self.where} refused the judge's credentials ({code}) when asked to {what} blob "
                f"{sha256[:12]}: check [storage] credentials_file (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY) "
                "and the bucket's policy."))
        return InfrastructureError("store-unavailable", (
            f"the object store {self.where} answered {code} when asked to {what} blob {sha256[:12]}: check the "
            "store; the stage runs again shortly."))


def stored(storage: StorageSite) -> Stored | None:
    """The store site.toml's [storage] names, with this host's bounded copies; None without a url."""
    if not storage.url:
        return None
    if storage.cache_dir is None:
        raise ValueError("a store needs a directory for this host's notes of its copies")
    return Stored(ObjectStore(storage), BlobCache(storage.cache_dir, storage.cache_bytes))


def credentials(storage: StorageSite) -> tuple[str, str]:
    """The access key id and secret key: from [storage] credentials_file (first and second lines),
    which only the daemon's user may read, or else from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.
    Given to the client outright, so that it never goes looking for others of its own."""
    if storage.credentials_file is not None:
        what = "The object store's credentials file"
        lines = read_private(storage.credentials_file, what).splitlines()
        if len(lines) < 2 or not lines[0].strip() or not lines[1].strip():
            raise ConfigError(f"{what} {storage.credentials_file} is not allowed: write the access key id on its "
                              "first line and the secret key on its second.")
        return lines[0].strip(), lines[1].strip()
    key_id, secret = os.environ.get("AWS_ACCESS_KEY_ID", ""), os.environ.get("AWS_SECRET_ACCESS_KEY", "")
    if not key_id or not secret:
        raise ConfigError("[storage] in site.toml has no credentials_file and AWS_ACCESS_KEY_ID or "
                          "AWS_SECRET_ACCESS_KEY is not set: name a file only the daemon's user may read in "
                          "credentials_file, or set both variables.")
    return key_id, secret


def tries(n: int) -> str:
    return "1 try" if n == 1 else f"{n} tries"


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", "")) or str(
        exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", "an error"))
