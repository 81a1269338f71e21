"""Benchmark: claims per second on the queue, SQLite against PostgreSQL, 1, 2 and 4 claimers, a sweep of queue
sizes, and the listings at 100,000 entries (JSON on stdout).

What is measured: how fast claimers take queued stages off one queue, as daemons do. A queue
holds N (default 10 000) entries queued at stage prep of one challenge, of 97 owners. K claimers
(1, 2, 4), each a separate process (multiprocessing, spawn) with its own `Queue(location,
host="cI")`, loop `claim_next()` then `start_stage(id, "prep", 0)` (a claim as the daemon makes
it: the lease and its event in one transaction, then the stage run that holds the entry in
another) until nothing is left, and record the ids they got and how long each claim_next took.
`seconds` runs from the moment all K, started and connected, are told to go until the last one
finds the queue empty; claims/s = N / seconds; p50 and p99 are of claim_next alone. Before each
measurement a queue is built afresh, in one transaction, with the columns `add_entry` writes and
its "submitted" events (on PostgreSQL also the one blob row of the archive all entries share, as
a shared queue stores it): `add_entry` one by one would cost a synced transaction per entry.

--ready 1000,10000,100000 (the issue's sweep): for each size, a queue of that many ready stages,
--ready-claimers (4) processes making --ready-claims (1000) claims in all, the same loop: claims/s
and the p50/p99 of claim_next at each size, and p99 at the largest size / p99 at the smallest
(fair share's claim looks at owners, not stages: queue/claim.py). Also `status --json` read on
that queue, where every entry is queued (status lists the running and parked ones and the oldest
queued, 100 in all, and counts the rest).

--listing 100000: a queue of that many entries (1 in 100 queued, the others scored, with an exam
run each, 97 owners) and what the organiser's and participants' listings read, timed in this
process (best and median of 5; no interpreter start): `vmjudge entries` (its first page of 50, an
owner's done ones, page 100), `status --json`, the portal's "my entries" (25 a page), the
organiser's and the participants' leaderboards.

The two backends, on the same disk (the SQLite file under --dir, default /var/tmp, where
tests/pg_server.py also puts the server's files):
- sqlite: the queue's file as a single host has it (connection.py: WAL, synchronous=FULL,
  BEGIN IMMEDIATE, one connection per process kept open). One writer at a time: the claimers'
  write transactions take turns (a claimer waiting for the lock polls every 0.2-2 ms), so the
  figure cannot grow with the claimers beyond what one writer does when it never waits; what
  lies outside the write lock (Python) overlaps.
- postgresql: a throw-away server (tests/pg_server.py: initdb, a unix socket only, started and
  stopped by this bench; a database per measurement). The tests run it with fsync=off, set on
  its command line; the bench restarts it with fsync=on, so its commits reach the disk as
  SQLite's do (--pg-fsync off keeps the tests' setting). A claim reads the owners' heads, then
  takes one with `UPDATE ... WHERE id = (SELECT ... LIMIT 1 FOR UPDATE SKIP LOCKED)`: a claimer
  skips the row another is claiming instead of waiting for it, so claims run in parallel as far
  as the cores allow (here shared by the claimers, their server processes and the server's
  own), and concurrent commits can share a flush of the WAL. By default the tables are not
  analyzed (and autovacuum is held off them while they are measured, so the plan stays the same
  from the first claim to the last); --pg-stats full takes statistics once the queue is full
  (VACUUM ANALYZE). The owners' counts (queue/queued.py) are vacuumed once built: each entry
  inserted updates its owner's row, and the versions of one transaction cannot be pruned as those
  of admissions one by one are (10,000 entries left the 97 rows in 55 pages, which every claim
  read). The JSON gives the claim's scans (EXPLAIN of the claim's statements, taken before the
  claimers start, on every queue measured: the distinct plans). The listing queue is analyzed, as
  autovacuum leaves a table that grew by that much.

Ratios: `ratio_vs_1` = a backend's claims/s with K claimers / the same backend's with 1, measured
in the same run (1.0: more claimers gain nothing); `postgresql_vs_sqlite` = PostgreSQL's
claims/s / SQLite's at the same K. With --rounds R each figure is measured R times (claimer
counts and backends interleaved, each on a queue built afresh) and the best counts. These are
figures of this machine at this moment (its cores, its disk, whatever else runs on it), for
comparison within one run; none of them is a limit that anything checks.

Checked after every measurement (the run exits 1 with a sentence otherwise): no entry claimed
twice (each claimer's ids), `SELECT COUNT(*) FROM stage_runs` is the number of claims, no entry
has two stage runs, each run's host is the claimer that reported its entry; when the claimers
emptied the queue, every entry was claimed.

--smoke: 200 stages, a sweep of 100 and 200 ready stages (40 claims), 300 entries listed, one
round, the same backends, claimer counts and checks (seconds; what the test suite runs, so that
a change that breaks the bench fails there).

Usage: python bench/queue_bench.py [--smoke] [--stages 10000] [--rounds 1] [--claimers 1,2,4] [--json-only]
                             [--ready 1000,10000,100000] [--ready-claimers 4] [--ready-claims 1000]
                             [--listing 100000] [--pg-fsync on|off] [--pg-stats none|full] [--dir /var/tmp]
"""

from __future__ import annotations

import sys
from pathlib import Path

# Not named queue.py: bench/ is first on sys.path for every script in it, and `import queue`
# (which multiprocessing and psycopg do) must find the standard library's.
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import argparse  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import multiprocessing  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import sqlite3  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from collections.abc import Callable, Iterator, Sequence  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from queue import Empty  # noqa: E402 - the standard library's
from typing import Any  # noqa: E402
from urllib.parse import parse_qs, urlsplit  # noqa: E402

import psycopg  # noqa: E402

# its helpers, to restart the server it starts with other options
from tests.pg_server import _as_postgres, _bin, fresh_database, postgres_server  # noqa: E402
from vmjudge.pipeline import FIRST  # noqa: E402
from vmjudge.queue.connection import Database, Db, open_database  # noqa: E402
from vmjudge.queue.db import Queue  # noqa: E402
from vmjudge.queue.listing import EntryFilter, find_entries, queue_status  # noqa: E402
from vmjudge.queue.rows import now  # noqa: E402
from vmjudge.reports.leaderboard import leaderboard  # noqa: E402

CHALLENGE = "bench"
ARCHIVE = b"PK\x05\x06" + bytes(18)  # an empty zip: the archive every entry shares
ARCHIVE_SHA256 = hashlib.sha256(ARCHIVE).hexdigest()


class BenchFailed(Exception):
    """A check failed: the sentence says which."""


def say(quiet: bool, text: str) -> None:
    if not quiet:
        print(text, file=sys.stderr, flush=True)


# building the queue


def build(location: str, n: int, archive: Path, analyze: bool = False) -> float:
    """A queue at `location` holding `n` entries queued at stage prep of one challenge; seconds taken."""
    started = time.perf_counter()
    queue = Queue(location, host="setup")
    queue.add_challenge(CHALLENGE, archive.parent, "bench-image")
    database = queue.database
    postgres = database.dialect.name == "postgresql"
    mark = "%s" if postgres else "?"
    at = now()
    entries = [(CHALLENGE, f"team{i % 97}", 0, 0, ARCHIVE_SHA256, archive.name, str(archive), at, FIRST)
               for i in range(n)]
    with database.transaction() as db:
        if queue.shared:  # a shared queue stores the archive's bytes; every entry here has the same
            queue.blobs.put_file(db, ARCHIVE_SHA256, archive)
        cursor = db.raw.cursor()
        cursor.executemany(
            "INSERT INTO entries (challenge, owner, late, dry_run, archive_sha256, archive_name, archive_path, "
            f"submitted_at, state, stage) VALUES ({', '.join([mark] * 8)}, 'queued', {mark})", entries)
        cursor.execute("SELECT id FROM entries ORDER BY id")
        ids = [row[0] for row in cursor.fetchall()]
        cursor.executemany(f"INSERT INTO events (entry_id, at, kind, detail) VALUES ({', '.join([mark] * 4)})",
                           [(i, at, "submitted", f"{archive.name} sha256 {ARCHIVE_SHA256} by bench") for i in ids])
    if postgres:
        with database.connect() as db:
            for table in ("entries", "stage_runs", "events"):  # the same plan from the first claim to the last
                db.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
            if analyze:  # --pg-stats full: statistics of the queue with every entry queued
                db.execute("VACUUM ANALYZE")
            else:  # the owners' counts as admissions one by one leave them: a page, not 55 of versions
                db.execute("VACUUM owner_queued")  # made dead by this one transaction's 10,000 entries
    return time.perf_counter() - started


class Explained(Exception):
    def __init__(self, plan: list[str]):
        self.plan = plan


class ExplainingDb:
    """A Db that EXPLAINs the claim's statements up to the first that claims (which is not run):
    nearly always the claim as one statement (claim.take_first, on PostgreSQL take_first_logged)."""

    def __init__(self, db: Db):
        self.db = db
        self.scans: list[str] = []

    def explain(self, sql: str, args: Sequence[Any]) -> None:
        rows = self.db.execute("EXPLAIN " + sql, args).fetchall()
        self.scans += [re.sub(r"\s*\(cost=.*", "", row[0]).strip(" ->") for row in rows if "Scan" in row[0]]

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Any:
        self.explain(sql, args)
        if "UPDATE entries SET state = 'running'" in sql:  # the claim as one statement, or its take
            raise Explained(self.scans)
        return self.db.execute(sql, args)


class Explaining:
    """The queue's database, its connections and transactions given an ExplainingDb."""

    def __init__(self, database: Database):
        self.database, self.dialect, self.where = database, database.dialect, database.where

    def create(self) -> None:
        self.database.create()

    @contextmanager
    def connect(self) -> Iterator[Any]:  # on PostgreSQL the claim is one statement outside a transaction
        with self.database.connect() as db:
            yield ExplainingDb(db)

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        with self.database.transaction() as db:
            yield ExplainingDb(db)


def claim_plan(location: str) -> list[str]:
    """How PostgreSQL finds the row a claim takes, as Queue.claim_next asks (its scans); nothing claimed."""
    try:
        Queue(Explaining(open_database(location)), host="explain").claim_next()
    except Explained as plan:
        return plan.plan
    return []


# the claimers


def claimer(location: str, host: str, go: Any, results: Any, limit: int | None = None) -> None:
    """One daemon's claims: connect, say ready, wait for go, then claim until nothing is left (or
    `limit` claims are made), timing each claim_next."""
    try:
        queue = Queue(location, host=host)
        with queue.database.connect():  # this process's connection, made before the clock starts
            pass
        results.put(("ready", host, None))
        go.wait()
        ids, latencies = [], []
        while limit is None or len(ids) < limit:
            started = time.perf_counter()
            entry = queue.claim_next()
            latencies.append(time.perf_counter() - started)
            if entry is None:
                break
            queue.start_stage(entry.id, FIRST, 0)
            ids.append(entry.id)
        results.put(("done", host, (ids, time.monotonic(), latencies)))
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which fails the run with it
        results.put(("failed", host, f"{type(exc).__name__}: {exc}"))


@dataclass
class Measured:
    seconds: float  # from go to the last claimer done
    got: dict[str, list[int]]  # claimer -> entry ids it claimed
    latencies: list[float]  # every claim_next's seconds, the last (empty) one of each claimer included

    @property
    def claims(self) -> int:
        return sum(len(ids) for ids in self.got.values())

    def percentile(self, p: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def measure(location: str, k: int, limit: int | None = None) -> Measured:
    """K claimer processes emptying the queue at `location` (or taking `limit` claims each)."""
    ctx = multiprocessing.get_context("spawn")
    go, results = ctx.Event(), ctx.Queue()
    procs = {f"c{i}": ctx.Process(target=claimer, args=(location, f"c{i}", go, results, limit), daemon=True)
             for i in range(k)}
    for p in procs.values():
        p.start()
    ready: set[str] = set()
    got: dict[str, list[int]] = {}
    latencies: list[float] = []
    finished: list[float] = []
    started = time.monotonic()
    try:
        while len(got) < k:
            try:
                what, host, said = results.get(timeout=1)
            except Empty:
                silent = [h for h, p in procs.items() if p.exitcode is not None and h not in got]
                if silent and results.empty():
                    raise BenchFailed(f"the claimer {silent[0]} on {location.split('?')[0]} ended without a word "
                                      f"(exit status {procs[silent[0]].exitcode}).") from None
                continue
            if what == "failed":
                raise BenchFailed(f"the claimer {host} on {location.split('?')[0]} failed: {str(said).rstrip('.')}.")
            if what == "ready":
                ready.add(host)
                if len(ready) == k:  # every claimer started and connected
                    started = time.monotonic()
                    go.set()
            else:
                got[host], ended, theirs = said
                finished.append(ended)
                latencies += theirs
    finally:
        for p in procs.values():
            p.join(timeout=10 if len(got) == k else 0)
            if p.exitcode is None:
                p.terminate()
                p.join()
    return Measured(max(finished) - started, got, latencies)


def check(location: str, n: int, got: dict[str, list[int]], drained: bool = True) -> None:
    """No entry claimed twice, each claim by the claimer that says so with one stage run; when
    the claimers emptied the queue, every one of the `n` entries claimed."""
    queue = Queue(location, host="check")
    with queue.database.connect() as db:
        entries = {row[0] for row in db.execute("SELECT id FROM entries").fetchall()}
        runs = db.execute("SELECT COUNT(*) FROM stage_runs").fetchone()[0]
        twice = db.execute("SELECT entry_id FROM stage_runs GROUP BY entry_id HAVING COUNT(*) > 1").fetchall()
        hosts = {row[0]: row[1] for row in db.execute("SELECT entry_id, host FROM stage_runs").fetchall()}
    claimed = [i for ids in got.values() for i in ids]
    dupes = [i for i, c in Counter(claimed).items() if c > 1]
    if dupes:
        raise BenchFailed(f"{len(dupes)} stage(s) were claimed twice (entry {dupes[0]} first).")
    if len(entries) != n or (drained and (set(claimed) != entries or len(claimed) != n)):
        raise BenchFailed(f"the claimers got {len(claimed)} stages of {len(entries)} entries "
                          f"({len(entries - set(claimed))} never claimed), not {n}.")
    if runs != len(claimed):
        raise BenchFailed(f"stage_runs holds {runs} rows after {len(claimed)} claims.")
    if twice:
        raise BenchFailed(f"{len(twice)} entry(ies) have two stage runs (entry {twice[0][0]} first).")
    wrong = [i for host, ids in got.items() for i in ids if hosts.get(i) != host]
    if wrong:
        raise BenchFailed(f"{len(wrong)} stage run(s) belong to another host than the claimer that reported "
                          f"them (entry {wrong[0]} first).")


def durable(server: str) -> None:
    """Restart the test server (fsync=off, set on its command line, which no configuration file
    overrides) with fsync on, its other options as tests/pg_server.py gives them."""
    socket_dir = parse_qs(urlsplit(server).query)["host"][0]
    _as_postgres([_bin("pg_ctl"), "-D", str(Path(socket_dir) / "data"), "-l", str(Path(socket_dir) / "log"),
                  "-w", "-m", "fast", "-o",
                  f"-c listen_addresses='' -k {socket_dir} -c fsync=on -c max_connections=200", "restart"])


# listing at scale


def fill_listing(location: str, n: int, archive: Path) -> float:
    """A queue at `location` of `n` entries of 97 owners as a busy challenge ends: 1 in 100 queued,
    the rest done and scored, each with its exam's stage run (what a board row reads); seconds."""
    started = time.perf_counter()
    queue = Queue(location, host="setup")
    queue.add_challenge(CHALLENGE, archive.parent, "bench-image")
    database = queue.database
    mark = "%s" if database.dialect.name == "postgresql" else "?"
    at = now()
    rows = [(CHALLENGE, f"team{i % 97}", ARCHIVE_SHA256, archive.name, str(archive), at, "queued", FIRST, None, None)
            if i % 100 == 0 else (CHALLENGE, f"team{i % 97}", ARCHIVE_SHA256, archive.name, str(archive), at, "done",
                                  None, "scored", json.dumps({"score": (i * 7919 % 1000) / 1000}))
            for i in range(n)]
    with database.transaction() as db:
        if queue.shared:
            queue.blobs.put_file(db, ARCHIVE_SHA256, archive)
        cursor = db.raw.cursor()
        cursor.executemany(
            "INSERT INTO entries (challenge, owner, late, dry_run, archive_sha256, archive_name, archive_path, "
            f"submitted_at, state, stage, outcome, scores) VALUES ({mark}, {mark}, 0, 0, {', '.join([mark] * 8)})",
            rows)
        cursor.execute("SELECT id FROM entries WHERE state = 'done' ORDER BY id")
        done = [row[0] for row in cursor.fetchall()]
        cursor.executemany("INSERT INTO stage_runs (entry_id, stage, attempt, host, slot, started_at, finished_at, "
                           f"status, manifest) VALUES ({mark}, 'exam', 1, 'bench', 0, {mark}, {mark}, 'passed', "
                           "'{}')",
                           [(i, at, at) for i in done])
    if database.dialect.name == "postgresql":
        with database.connect() as db:
            db.execute("VACUUM ANALYZE")  # as autovacuum leaves a table that grew by 100,000 rows
    return time.perf_counter() - started


def timed(what: Callable[[], Any], repeats: int) -> dict[str, float]:
    """`what` run `repeats` times: its best and median milliseconds."""
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        what()
        seconds.append(time.perf_counter() - started)
    return {"best_ms": round(min(seconds) * 1000, 2), "median_ms": round(statistics.median(seconds) * 1000, 2)}


def listing_times(location: str, repeats: int) -> dict[str, dict[str, float]]:
    """What the organiser's and participants' listings read, in this process (no interpreter start):
    `vmjudge entries` (its first page of 50, an owner's done ones, page 100), `status --json`, the
    portal's "my entries" (25 a page) and the leaderboards (the organiser's, and participants' now)."""
    queue = Queue(location, host="listing")
    database = queue.database
    return {
        "entries": timed(lambda: find_entries(database, EntryFilter(), limit=50), repeats),
        "entries_owner_done": timed(lambda: find_entries(database, EntryFilter(owner="team5", states=("done",)),
                                                         limit=50), repeats),
        "entries_page_100": timed(lambda: find_entries(database, EntryFilter(), limit=50, offset=99 * 50), repeats),
        "status_json": timed(lambda: json.dumps(status_document(queue)), repeats),
        "portal_my_entries": timed(lambda: find_entries(database, EntryFilter(owner="team5"), limit=25), repeats),
        "leaderboard_organiser": timed(lambda: leaderboard(queue, CHALLENGE), repeats),
        "leaderboard_participants": timed(lambda: leaderboard(queue, CHALLENGE, at=time.time()), repeats),
    }


def status_document(queue: Queue) -> dict[str, Any]:
    """`vmjudge status --json`'s entries part, as the command reads it (its default limit)."""
    return queue_status(queue.database).as_json()


# the run


def new_location(backend: str, base: Path, server: str, made: int) -> str:
    if backend == "sqlite":
        return str(base / f"queue-{made}.sqlite")
    return fresh_database(server, f"bench_{made}")


def forget(location: str) -> None:
    """A measured SQLite queue's files, removed (a PostgreSQL database stays until the server goes)."""
    if not location.startswith("postgresql"):
        for suffix in ("", "-wal", "-shm"):
            Path(location + suffix).unlink(missing_ok=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stages", type=int, default=10_000, help="queued stages to claim per measurement")
    parser.add_argument("--rounds", type=int, default=1, help="measurements of each figure; the best counts")
    parser.add_argument("--claimers", default="1,2,4", help="claimer counts, comma-separated (1 is always added)")
    parser.add_argument("--ready", default="1000,10000,100000",
                        help="ready stages of the sweep, comma-separated ('' for no sweep)")
    parser.add_argument("--ready-claimers", type=int, default=4, help="claimer processes at each size of the sweep")
    parser.add_argument("--ready-claims", type=int, default=1000, help="claims made (in all) at each size")
    parser.add_argument("--listing", type=int, default=100_000, help="entries of the listing queue (0: none)")
    parser.add_argument("--dir", type=Path, default=Path("/var/tmp"), help="where the SQLite file goes")
    parser.add_argument("--pg-fsync", choices=("on", "off"), default="on",
                        help="PostgreSQL's fsync (the tests' server has it off); on: commits reach the disk")
    parser.add_argument("--pg-stats", choices=("none", "full"), default="none",
                        help="PostgreSQL's statistics: none, or taken of the full queue (VACUUM ANALYZE)")
    parser.add_argument("--json-only", action="store_true", help="no progress on stderr")
    parser.add_argument("--smoke", action="store_true",
                        help="200 stages, a sweep of 100 and 200 ready, 300 listed, one round: seconds, "
                             "the same checks")
    args = parser.parse_args()
    if args.smoke:
        args.stages, args.rounds, args.ready, args.ready_claims, args.listing = 200, 1, "100,200", 40, 300
    counts = sorted({1, *(int(k) for k in args.claimers.split(","))})
    sizes = [int(size) for size in args.ready.split(",") if size]
    quiet, n = args.json_only, args.stages
    base = Path(tempfile.mkdtemp(prefix="bench-queue-", dir=args.dir))
    archive = base / "bench-entry.zip"
    archive.write_bytes(ARCHIVE)
    backends = ("sqlite", "postgresql")
    runs: dict[str, dict[int, list[Measured]]] = {b: {k: [] for k in counts} for b in backends}
    sweep: dict[str, dict[int, list[Measured]]] = {b: {size: [] for size in sizes} for b in backends}
    status_ms: dict[str, dict[int, dict[str, float]]] = {b: {} for b in backends}
    setup: dict[str, list[float]] = {b: [] for b in backends}
    listed: dict[str, dict[str, Any]] = {}
    plans: set[tuple[str, ...]] = set()
    started = time.perf_counter()
    try:
        with postgres_server() as server:
            if args.pg_fsync == "on":
                durable(server)
            with psycopg.connect(server, autocommit=True) as conn:
                pg = {name: conn.execute(f"SHOW {name}").fetchone()[0]
                      for name in ("server_version", "fsync", "synchronous_commit")}
            made = 0
            for r in range(args.rounds):
                for k in counts:  # throughput: K claimers empty a queue of --stages
                    for backend in backends:
                        made += 1
                        location = new_location(backend, base, server, made)
                        setup[backend].append(build(location, n, archive, analyze=args.pg_stats == "full"))
                        if backend == "postgresql":
                            plans.add(tuple(claim_plan(location)))
                        got = measure(location, k)
                        check(location, n, got.got)
                        runs[backend][k].append(got)
                        say(quiet, f"round {r + 1}, {backend}, {k} claimer(s): {got.seconds:.2f} s, "
                                   f"{n / got.seconds:.0f} claims/s, p99 claim {got.percentile(0.99) * 1000:.1f} ms "
                                   f"(claims per claimer: {sorted(len(ids) for ids in got.got.values())})")
                        forget(location)
                for size in sizes:  # latency: --ready-claims claims from a queue of each size
                    for backend in backends:
                        made += 1
                        location = new_location(backend, base, server, made)
                        build(location, size, archive, analyze=args.pg_stats == "full")
                        if backend == "postgresql":
                            plans.add(tuple(claim_plan(location)))
                        got = measure(location, args.ready_claimers, -(-args.ready_claims // args.ready_claimers))
                        check(location, size, got.got, drained=False)
                        sweep[backend][size].append(got)
                        status = Queue(location, host="status")  # every entry of this queue is not done
                        status_ms[backend][size] = timed(lambda q=status: json.dumps(status_document(q)), 3)
                        say(quiet, f"round {r + 1}, {backend}, {size} ready, {args.ready_claimers} claimer(s): "
                                   f"{got.claims / got.seconds:.0f} claims/s, p50 {got.percentile(0.5) * 1000:.1f} ms, "
                                   f"p99 {got.percentile(0.99) * 1000:.1f} ms")
                        forget(location)
            if args.listing:
                for backend in backends:
                    made += 1
                    location = new_location(backend, base, server, made)
                    seconds = fill_listing(location, args.listing, archive)
                    listed[backend] = {"setup_seconds": round(seconds, 2), **listing_times(location, 5)}
                    say(quiet, f"{backend}, {args.listing} entries: " + ", ".join(
                        f"{name} {t['median_ms']:.1f} ms" for name, t in listed[backend].items()
                        if isinstance(t, dict)))
                    forget(location)
    except BenchFailed as exc:
        print(f"bench/queue_bench.py: {exc}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(base, ignore_errors=True)

    figures: dict[str, dict[str, Any]] = {}
    for backend, by_k in runs.items():
        one = n / min(m.seconds for m in by_k[1])
        figures[backend] = {}
        for k, measured in by_k.items():
            best = min(measured, key=lambda m: m.seconds)
            figures[backend][str(k)] = {
                "seconds": round(best.seconds, 3), "claims_per_second": round(n / best.seconds, 1),
                "ratio_vs_1": round(n / best.seconds / one, 3), "all_seconds": [round(m.seconds, 3) for m in measured],
                "p50_claim_ms": round(best.percentile(0.5) * 1000, 2),
                "p99_claim_ms": round(best.percentile(0.99) * 1000, 2),
                "claims_per_claimer": sorted(len(ids) for ids in best.got.values())}
    swept: dict[str, dict[str, Any]] = {}
    for backend, by_size in sweep.items():
        swept[backend] = {}
        for size, measured in by_size.items():
            best = min(measured, key=lambda m: m.percentile(0.99))
            swept[backend][str(size)] = {"claims": best.claims,
                                         "claims_per_second": round(best.claims / best.seconds, 1),
                                         "p50_claim_ms": round(best.percentile(0.5) * 1000, 2),
                                         "p99_claim_ms": round(best.percentile(0.99) * 1000, 2),
                                         "status_json_every_entry_active": status_ms[backend][size]}
        if len(sizes) > 1:
            swept[backend]["p99_largest_vs_smallest"] = round(
                swept[backend][str(sizes[-1])]["p99_claim_ms"] / swept[backend][str(sizes[0])]["p99_claim_ms"], 2)
    print(json.dumps({
        "benchmark": "queue-claims", "smoke": args.smoke, "stages": n, "rounds": args.rounds,
        "what": "K processes each looping claim_next() + start_stage(id, 'prep', 0) until the queue is empty; "
                "seconds from go to the last one done (best round), claims/s = stages / seconds; p50/p99 of "
                "claim_next alone. ready: --ready-claimers processes making --ready-claims claims in all from a "
                "queue of each size (97 owners, fair share), best round by p99",
        "sqlite": {"settings": "WAL, synchronous=FULL, BEGIN IMMEDIATE, a connection per process kept open",
                   "setup_seconds": round(max(setup["sqlite"]), 2), "claimers": figures["sqlite"]},
        "postgresql": {"settings": f"unix socket, fsync={pg['fsync']}, synchronous_commit="
                                   f"{pg['synchronous_commit']}, READ COMMITTED, a connection per process",
                       "statistics": args.pg_stats, "claim_scans": [list(p) for p in sorted(plans)],
                       "setup_seconds": round(max(setup["postgresql"]), 2), "claimers": figures["postgresql"]},
        "postgresql_vs_sqlite": {str(k): round(figures["postgresql"][str(k)]["claims_per_second"]
                                               / figures["sqlite"][str(k)]["claims_per_second"], 3) for k in counts},
        "ready": {"claimers": args.ready_claimers, "claims": args.ready_claims, **swept},
        "listing": {"entries": args.listing, "what": "milliseconds in this process, best and median of 5", **listed},
        "every_stage_claimed_once": True,
        "total_seconds": round(time.perf_counter() - started, 1),
        "host": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                 "sqlite": sqlite3.sqlite_version, "postgresql": pg["server_version"],
                 "psycopg": psycopg.__version__, "disk": str(args.dir)},
    }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
