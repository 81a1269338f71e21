"""site.toml's [storage]: the S3-compatible object store that hosts sharing no files keep their
blobs in (entries' archives, stage-3 results), and the bound on each host's local copies of them.

Left out, nothing changes: one host keeps its spool and results store, and several hosts sharing a
PostgreSQL queue keep the blobs in it, in parts. With a url, the queue keeps only each blob's row
and the bytes live in the bucket (queue/object_store.py), each host keeping a bounded cache of them
(queue/blob_cache.py). Only the path of the credentials file is read here: the file itself is read
where the store is opened, through the one check of secret files (notify/secrets.py), which this
layer may not import.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .layout import Layout
from .values import Section

# s3://bucket or s3://bucket/prefix: a bucket name as S3 allows one (3 to 63 lowercase letters,
# digits, dots and dashes), a prefix of plain path segments.
URL_RE = re.compile(r"s3://([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:/([A-Za-z0-9._-]+(?:/[A-Za-z0-9._-]+)*))?/?")
GIB = 1 << 30


@dataclass(frozen=True)
class StorageSite:
    """Where the blobs live when no file is shared, and how long the judge waits for the store.
    A store that is down or slow costs a stage `attempts` tries of `timeout` seconds each, then
    the stage fails as the infrastructure's (retried, never charged to the entry), so a stage
    never hangs on it."""

    url: str | None = None  # s3://bucket/prefix; None: no store
    endpoint: str | None = None  # http://127.0.0.1:9000: an S3-compatible server; None: AWS's for the region
    region: str = "us-east-1"
    credentials_file: Path | None = None  # None: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY from the environment
    cache_bytes: int = 20 * GIB  # this host's copies of blobs, least recently used removed first beyond this
    timeout: float = 5.0  # seconds to connect, and to wait for each reply
    attempts: int = 3  # tries of each request before the store is called unavailable
    cache_dir: Path | None = None  # HOME/blob-cache, set by read_storage

    @property
    def bucket(self) -> str:
        return self._parts()[0]

    @property
    def prefix(self) -> str:
        """The keys' common beginning, without a trailing slash ("" for the bucket's root)."""
        return self._parts()[1]

    def _parts(self) -> tuple[str, str]:
        match = URL_RE.fullmatch(self.url or "")
        if match is None:
            raise ValueError(f"not an s3:// URL: {self.url!r}")
        return match.group(1), match.group(2) or ""


def read_storage(source: str, data: dict[str, Any], home: Path) -> StorageSite:
    """[storage], every key looked for whether the table is there or not (the reference page's
    test watches the reader read them)."""
    sec = Section(source, "storage", data.get("storage", {}))
    url = sec.get("url", str, None, lambda v: URL_RE.fullmatch(v) is not None,
                  "an S3 URL such as \"s3://vmjudge\" or \"s3://vmjudge/contest-2026\" (a bucket of 3 to 63 "
                  "lowercase letters, digits, dots and dashes, then a prefix if wanted)")
    endpoint = sec.get("endpoint", str, None, lambda v: re.fullmatch(r"https?://[^\s/]+/?", v) is not None,
                       "the S3-compatible server's URL, such as \"http://127.0.0.1:9000\" or "
                       "\"https://s3.example.org\"")
    region = sec.get("region", str, StorageSite.region, lambda v: re.fullmatch(r"[a-z0-9-]{1,40}", v) is not None,
                     "a region name such as \"us-east-1\"")
    credentials = sec.get("credentials_file", str, None, lambda v: v.startswith("/"),
                          "an absolute path to a file only the daemon's user may read, the access key id on its "
                          "first line and the secret key on its second")
    cache = sec.get("cache_gib", float, StorageSite.cache_bytes / GIB, lambda v: 0 < v <= 1 << 20,
                    "GiB above 0, at most 1048576")
    timeout = sec.get("timeout_seconds", float, StorageSite.timeout, lambda v: 0.1 <= v <= 300,
                      "seconds from 0.1 to 300")
    attempts = sec.get("attempts", int, StorageSite.attempts, lambda v: 1 <= v <= 10, "a whole number from 1 to 10")
    sec.done()
    return StorageSite(url=url, endpoint=endpoint, region=region,
                       credentials_file=Path(credentials) if credentials else None, cache_bytes=int(cache * GIB),
                       timeout=timeout, attempts=attempts, cache_dir=Layout(home).blob_cache)
