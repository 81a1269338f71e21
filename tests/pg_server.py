"""A throw-away PostgreSQL server for the tests and benchmarks: made by initdb in a fresh
directory, listening only on a unix socket there (listen_addresses=''), no network address at
all; stopped and removed afterwards. Debian's `postgresql` package (make setup) provides the
binaries; the server runs as the `postgres` user, as Debian runs it, so its directory is not
under pytest's root-only temporary directories."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg


def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        raise RuntimeError(f"PostgreSQL's {name} is not installed: run `make setup` (Debian package postgresql).")
    return found[-1]


def _as_postgres(argv: list[str]) -> None:
    subprocess.run(["runuser", "-u", "postgres", "--", *argv], check=True, capture_output=True, timeout=120)


@contextmanager
def postgres_server() -> Iterator[str]:
    """A running server; yields the URL of its `postgres` database (over the socket)."""
    base = Path(tempfile.mkdtemp(prefix="vmjudge-pg-", dir="/var/tmp"))
    user = pwd.getpwnam("postgres")
    os.chown(base, user.pw_uid, user.pw_gid)
    data, socket_dir = base / "data", base
    try:
        _as_postgres([_bin("initdb"), "-D", str(data), "--auth=trust", "-U", "postgres", "--no-sync"])
        _as_postgres([_bin("pg_ctl"), "-D", str(data), "-w", "-l", str(base / "log"), "-o",
                      f"-c listen_addresses='' -k {socket_dir} -c fsync=off -c max_connections=200", "start"])
        try:
            yield f"postgresql:///postgres?host={socket_dir}&user=postgres"
        finally:
            _as_postgres([_bin("pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"])
    finally:
        shutil.rmtree(base, ignore_errors=True)


def fresh_database(server_url: str, name: str) -> str:
    """An empty database `name` on the server (dropped first if there); its URL."""
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return server_url.replace("postgresql:///postgres?", f"postgresql:///{name}?")
