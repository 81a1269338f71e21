"""Benchmark: claims per second on the queue, SQLite against PostgreSQL, 1, 2 and 4 claimers (JSON on stdout).

What is measured: how fast claimers take queued stages off one queue, as daemons do. A queue
holds N (default 10 000) entries queued at stage prep of one challenge. K claimers (1, 2, 4),
each a separate process (multiprocessing, spawn) with its own `Queue(location, host="cI")`,
loop `claim_next()` then `start_stage(id, "prep", 0)` (a claim as the daemon makes it: the
lease and its event in one transaction, then the stage run that holds the entry in another)
until nothing is left, and record the ids they got. `seconds` runs from the moment all K,
started and connected, are told to go until the last one finds the queue empty; claims/s =
N / seconds. Nothing else is timed. Before each measurement a queue is built afresh, in one
transaction, with the columns `add_entry` writes and its "submitted" events (on PostgreSQL also
the one blob row of the archive all entries share, as a shared queue stores it): `add_entry`
one by one would cost a synced transaction per entry on SQLite.

The two backends, on the same disk (the SQLite file under --dir, default /var/tmp, where
tests/pg_server.py also puts the server's files):
- sqlite: the queue's file as a single host has it (connection.py: WAL, synchronous=FULL,
  BEGIN IMMEDIATE, a connection opened and closed per operation). One writer at a time: the
  claimers' write transactions take turns, so the figure cannot grow with the claimers beyond
  what one writer does when it never waits. What lies outside the write lock (Python, opening
  the connection, closing it) overlaps; and when a process closes the only connection to the
  file, SQLite checkpoints the WAL into the database and removes it, which a lone claimer pays
  at the end of every operation and claimers whose connections overlap mostly do not. So 2
  claimers can claim faster than 1 without any writes running in parallel.
- postgresql: a throw-away server (tests/pg_server.py: initdb, a unix socket only, started and
  stopped by this bench; a database per measurement). The tests run it with fsync=off, set on
  its command line; the bench restarts it with fsync=on, so its commits reach the disk as
  SQLite's do (--pg-fsync off keeps the tests' setting). A claim is `UPDATE ... WHERE id =
  (SELECT ... ORDER BY <fair share> LIMIT 1 FOR UPDATE SKIP LOCKED)`: a claimer skips the row another
  is claiming instead of waiting for it, so claims run in parallel as far as the cores allow
  (here shared by the claimers, their server processes and the server's own), and concurrent
  commits can share a flush of the WAL. One claimer leaves the cores idle while it waits for
  its server's answers. How the claim finds its row depends on the table's statistics. By
  default the tables are not analyzed (and autovacuum is held off them while they are
  measured, so the plan stays the same from the first claim to the last): the claim reads
  the entries_state index. --pg-stats full takes them once the queue is full (VACUUM ANALYZE
  with every entry queued, as autovacuum may after a first burst of submissions), which can
  make the planner walk the primary key instead, past every entry claimed so far. The JSON
  gives the claim's scans (EXPLAIN of the claim's own UPDATE, taken before the claimers start).

Ratios: `ratio_vs_1` = a backend's claims/s with K claimers / the same backend's with 1, measured
in the same run (1.0: more claimers gain nothing); `postgresql_vs_sqlite` = PostgreSQL's
claims/s / SQLite's at the same K. With --rounds R each figure is measured R times (claimer
counts and backends interleaved, each on a queue built afresh) and the best counts. These are
figures of this machine at this moment (its cores, its disk, whatever else runs on it), for
comparison within one run; none of them is a limit that anything checks.

Checked after every measurement (the run exits 1 with a sentence otherwise): every entry was
claimed and none twice (the union of the claimers' ids is the set of entries and their total
is N), `SELECT COUNT(*) FROM stage_runs` is N, no entry has two stage runs, and each run's
host is the claimer that reported its entry.

--smoke: 200 stages, one round, the same backends, claimer counts and checks (seconds; what the
test suite runs, so that a change that breaks the bench fails there).

Usage: python bench/queue_bench.py [--smoke] [--stages 10000] [--rounds 1] [--claimers 1,2,4] [--json-only]
                             [--pg-fsync on|off] [--pg-stats none|full] [--dir /var/tmp]
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
import tempfile  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from collections.abc import Iterator, Sequence  # noqa: E402
from contextlib import AbstractContextManager, contextmanager  # noqa: E402
from queue import Empty  # noqa: E402 - the standard library's
from typing import Any  # noqa: E402
from urllib.parse import parse_qs, urlsplit  # noqa: E402

import psycopg  # noqa: E402

# its helpers, to restart the server it starts with other options
from tests.pg_server import _as_postgres, _bin, fresh_database, postgres_server  # noqa: E402
from vmjudge.pipeline import FIRST  # noqa: E402
from vmjudge.queue.connection import Database, Db, open_database  # noqa: E402
from vmjudge.queue.db import Queue  # noqa: E402
from vmjudge.queue.rows import now  # noqa: E402

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
    return time.perf_counter() - started


class Explained(Exception):
    def __init__(self, plan: list[str]):
        self.plan = plan


class ExplainingDb:
    """A Db that EXPLAINs the claim's UPDATE instead of running it."""

    def __init__(self, db: Db):
        self.db = db

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Any:
        if sql.startswith("UPDATE entries SET state = 'running'"):
            rows = self.db.execute("EXPLAIN " + sql, args).fetchall()
            raise Explained([re.sub(r"\s*\(cost=.*", "", row[0]).strip(" ->") for row in rows if "Scan" in row[0]])
        return self.db.execute(sql, args)


class Explaining:
    """The queue's database, its transactions given an ExplainingDb."""

    def __init__(self, database: Database):
        self.database, self.dialect, self.where = database, database.dialect, database.where

    def create(self) -> None:
        self.database.create()

    def connect(self) -> AbstractContextManager[Db]:
        return self.database.connect()

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


def claimer(location: str, host: str, go: Any, results: Any) -> None:
    """One daemon's claims: connect, say ready, wait for go, then claim until nothing is left."""
    try:
        queue = Queue(location, host=host)
        with queue.database.connect():  # PostgreSQL: this process's connection, made before the clock starts
            pass
        results.put(("ready", host, None))
        go.wait()
        ids = []
        while (entry := queue.claim_next()) is not None:
            queue.start_stage(entry.id, FIRST, 0)
            ids.append(entry.id)
        results.put(("done", host, (ids, time.monotonic())))
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which fails the run with it
        results.put(("failed", host, f"{type(exc).__name__}: {exc}"))


def measure(location: str, k: int) -> tuple[float, dict[str, list[int]]]:
    """K claimer processes emptying the queue at `location`; (seconds, host -> ids claimed)."""
    ctx = multiprocessing.get_context("spawn")
    go, results = ctx.Event(), ctx.Queue()
    procs = {f"c{i}": ctx.Process(target=claimer, args=(location, f"c{i}", go, results), daemon=True)
             for i in range(k)}
    for p in procs.values():
        p.start()
    ready: set[str] = set()
    got: dict[str, list[int]] = {}
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
                got[host], ended = said
                finished.append(ended)
    finally:
        for p in procs.values():
            p.join(timeout=10 if len(got) == k else 0)
            if p.exitcode is None:
                p.terminate()
                p.join()
    return max(finished) - started, got


def check(location: str, n: int, got: dict[str, list[int]]) -> None:
    """Every entry claimed once, by the claimer that says so, with one stage run each."""
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
    if set(claimed) != entries or len(claimed) != n or len(entries) != n:
        raise BenchFailed(f"the claimers got {len(claimed)} stages of {len(entries)} entries "
                          f"({len(entries - set(claimed))} never claimed), not {n}.")
    if runs != n:
        raise BenchFailed(f"stage_runs holds {runs} rows after {n} claims.")
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


# the run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stages", type=int, default=10_000, help="queued stages to claim per measurement")
    parser.add_argument("--rounds", type=int, default=1, help="measurements of each figure; the best counts")
    parser.add_argument("--claimers", default="1,2,4", help="claimer counts, comma-separated (1 is always added)")
    parser.add_argument("--dir", type=Path, default=Path("/var/tmp"), help="where the SQLite file goes")
    parser.add_argument("--pg-fsync", choices=("on", "off"), default="on",
                        help="PostgreSQL's fsync (the tests' server has it off); on: commits reach the disk")
    parser.add_argument("--pg-stats", choices=("none", "full"), default="none",
                        help="PostgreSQL's statistics: none, or taken of the full queue (VACUUM ANALYZE)")
    parser.add_argument("--json-only", action="store_true", help="no progress on stderr")
    parser.add_argument("--smoke", action="store_true", help="200 stages, one round: seconds, the same checks")
    args = parser.parse_args()
    if args.smoke:
        args.stages, args.rounds = 200, 1
    counts = sorted({1, *(int(k) for k in args.claimers.split(","))})
    quiet, n = args.json_only, args.stages
    base = Path(tempfile.mkdtemp(prefix="bench-queue-", dir=args.dir))
    archive = base / "bench-entry.zip"
    archive.write_bytes(ARCHIVE)
    backends = ("sqlite", "postgresql")
    times: dict[str, dict[int, list[float]]] = {b: {k: [] for k in counts} for b in backends}
    setup: dict[str, list[float]] = {b: [] for b in backends}
    spread: dict[str, dict[int, list[int]]] = {b: {} for b in backends}
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
                for k in counts:
                    for backend in backends:
                        made += 1
                        if backend == "sqlite":
                            location = str(base / f"queue-{made}.sqlite")
                        else:
                            location = fresh_database(server, f"bench_{made}")
                        setup[backend].append(build(location, n, archive, analyze=args.pg_stats == "full"))
                        if backend == "postgresql":
                            plans.add(tuple(claim_plan(location)))
                        seconds, got = measure(location, k)
                        check(location, n, got)
                        times[backend][k].append(seconds)
                        spread[backend][k] = sorted(len(ids) for ids in got.values())
                        say(quiet, f"round {r + 1}, {backend}, {k} claimer(s): {seconds:.2f} s, "
                                   f"{n / seconds:.0f} claims/s (claims per claimer: {spread[backend][k]})")
                        if backend == "sqlite":
                            for suffix in ("", "-wal", "-shm"):
                                Path(location + suffix).unlink(missing_ok=True)
    except BenchFailed as exc:
        print(f"bench/queue_bench.py: {exc}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(base, ignore_errors=True)

    figures: dict[str, dict[str, Any]] = {}
    for backend, by_k in times.items():
        one = n / min(by_k[1])
        figures[backend] = {str(k): {"seconds": round(min(ts), 3), "claims_per_second": round(n / min(ts), 1),
                                     "ratio_vs_1": round(n / min(ts) / one, 3),
                                     "all_seconds": [round(t, 3) for t in ts],
                                     "claims_per_claimer": spread[backend][k]} for k, ts in by_k.items()}
    print(json.dumps({
        "benchmark": "queue-claims", "smoke": args.smoke, "stages": n, "rounds": args.rounds,
        "what": "K processes each looping claim_next() + start_stage(id, 'prep', 0) until the queue is empty; "
                "seconds from go to the last one done (best round), claims/s = stages / seconds",
        "sqlite": {"settings": "WAL, synchronous=FULL, BEGIN IMMEDIATE, a connection per operation",
                   "setup_seconds": round(max(setup["sqlite"]), 2), "claimers": figures["sqlite"]},
        "postgresql": {"settings": f"unix socket, fsync={pg['fsync']}, synchronous_commit="
                                   f"{pg['synchronous_commit']}, READ COMMITTED, a connection per process",
                       "statistics": args.pg_stats, "claim_scans": [list(p) for p in sorted(plans)],
                       "setup_seconds": round(max(setup["postgresql"]), 2), "claimers": figures["postgresql"]},
        "postgresql_vs_sqlite": {str(k): round(figures["postgresql"][str(k)]["claims_per_second"]
                                               / figures["sqlite"][str(k)]["claims_per_second"], 3) for k in counts},
        "every_stage_claimed_once": True,
        "total_seconds": round(time.perf_counter() - started, 1),
        "host": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                 "sqlite": sqlite3.sqlite_version, "postgresql": pg["server_version"],
                 "psycopg": psycopg.__version__, "disk": str(args.dir)},
    }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
