"""Each host's copies of the store's blobs, bounded (queue/blob_cache.py): the least recently used
go first once the bound is passed, a copy used within the grace period never goes, and copies that
someone else removed are forgotten. The clock is moved by hand; the copies are real files."""

from __future__ import annotations

import hashlib
from pathlib import Path

from vmjudge.queue.blob_cache import BlobCache


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def copies(tmp_path: Path, n: int, size: int = 1000) -> list[tuple[str, Path]]:
    """n blobs' copies, each named by its sha256 as the spool and the results store name theirs."""
    made = []
    for i in range(n):
        data = bytes([i]) * size
        sha = hashlib.sha256(data).hexdigest()
        path = tmp_path / "spool" / sha[:2] / f"{sha}.zip"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        made.append((sha, path))
    return made


def use(cache: BlobCache, clock: Clock, sha: str, path: Path, at: float) -> None:
    clock.now = at
    with cache.locked():
        cache.note(sha, path)


def used_in_turn(tmp_path: Path, n: int, bound: int, step: float = 1) -> tuple[Clock, BlobCache, list, float]:
    """A cache with a grace of 60 s and n copies, each used `step` seconds after the one before."""
    clock = Clock()
    cache = BlobCache(tmp_path / "cache", bound=bound, grace=60, clock=clock)
    blobs = copies(tmp_path, n)
    start = clock.now
    for i, (sha, path) in enumerate(blobs):
        use(cache, clock, sha, path, start + i * step)
    return clock, cache, blobs, start


def test_the_least_recently_used_go_first_until_the_bound_holds(tmp_path):
    clock, cache, blobs, start = used_in_turn(tmp_path, 5, bound=3000)
    use(cache, clock, *blobs[0], start + 10)  # the oldest, used again: now the most recent
    clock.now = start + 1000
    assert cache.kept() == (5, 5000)
    assert cache.trim() == [blobs[1][1], blobs[2][1]]  # least recently used first, until 3000 bytes
    assert [p.is_file() for _, p in blobs] == [True, False, False, True, True]
    assert cache.kept() == (3, 3000)
    assert cache.trim() == []  # within the bound: nothing more


def test_a_copy_used_within_the_grace_period_is_kept_above_the_bound(tmp_path):
    clock, cache, blobs, start = used_in_turn(tmp_path, 3, bound=1500)
    clock.now = start + 60.5  # the first's grace is over, the others' not
    assert cache.trim() == [blobs[0][1]]
    assert cache.kept() == (2, 2000)  # above the bound, both in use


def test_a_blob_kept_in_two_places_counts_twice_and_goes_whole(tmp_path):
    clock = Clock()
    cache = BlobCache(tmp_path / "cache", bound=1000, grace=0, clock=clock)
    (sha, path), (sha2, path2) = copies(tmp_path, 2)
    other = tmp_path / "archive" / sha
    other.parent.mkdir()
    other.write_bytes(path.read_bytes())
    use(cache, clock, sha, path, clock.now)
    use(cache, clock, sha, other, clock.now)
    use(cache, clock, sha2, path2, clock.now + 1)
    assert cache.kept() == (2, 3000)
    assert sorted(cache.trim()) == sorted([path, other])
    assert cache.kept() == (1, 1000)


def test_copies_removed_by_someone_else_are_forgotten(tmp_path):
    clock = Clock()
    cache = BlobCache(tmp_path / "cache", bound=10_000, grace=0, clock=clock)
    (sha, path), (sha2, path2) = copies(tmp_path, 2)
    use(cache, clock, sha, path, clock.now)
    use(cache, clock, sha2, path2, clock.now)
    path.unlink()  # `vmjudge gc`, or an admission taken back
    assert cache.kept() == (1, 1000)
    assert sorted(p.name for p in (tmp_path / "cache").rglob("*") if p.is_file()) == [".lock", sha2]
    assert (tmp_path / "cache").stat().st_mode & 0o777 == 0o700


def test_gc_removes_every_copy_unused_for_the_grace_whatever_the_bound(tmp_path):
    """`vmjudge gc` with a store: trim(bound=0); the store keeps the blobs, and a copy in use stays."""
    clock, cache, blobs, start = used_in_turn(tmp_path, 3, bound=1 << 30, step=100)
    clock.now = start + 200 + 30  # the last used 30 s ago
    assert cache.trim() == []  # far below the cache's bound
    assert cache.trim(bound=0) == [blobs[0][1], blobs[1][1]] and cache.kept() == (1, 1000)
