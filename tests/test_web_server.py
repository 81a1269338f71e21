"""`vmjudge web` as a server under abuse (issue 31), a real process on loopback: clients slow with
their headers or their body are cut off on time, an upload's temporary file goes with its
client, a client that goes away is one line in the log, one upload is in flight per owner, and
the rate limit holds across two portal processes on one PostgreSQL queue. Timeouts are set
small in site.toml ([web] header_timeout, body_timeout) so that each test takes seconds."""

from __future__ import annotations

import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psycopg
import pytest

from .test_web_abuse import failed_uploads, with_site
from .waiting import wait_for
from .web_home import WebHome, good_files, multipart
from .web_process import running_portal


@pytest.fixture
def served(tmp_path):
    web = with_site(WebHome(tmp_path), "[web]\nheader_timeout = 1\nbody_timeout = 3\n")
    with running_portal(web.home, tmp_path / "portal.log") as portal:
        yield web, portal


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.settimeout(0.1)
    return sock


def read_until_closed(sock: socket.socket, seconds: float) -> bytes:
    """Everything the server sends until it closes the connection; fails past `seconds`."""
    got, deadline = b"", time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        except ConnectionResetError:
            return got
        if not chunk:
            return got
        got += chunk
    raise AssertionError(f"the server kept the connection open for {seconds} s")


def test_a_client_slow_with_its_headers_is_cut_off(served):
    web, portal = served
    silent, dripping = connect(portal.port), connect(portal.port)
    start = time.monotonic()
    dripping.sendall(b"GET /signin HTTP/1.1\r\nHost: x\r\n")
    closed = False
    while not closed and time.monotonic() < start + 10:  # a header byte every 0.2 s, until the server hangs up
        try:
            dripping.sendall(b"X")
            closed = dripping.recv(1) == b""
        except TimeoutError:
            continue
        except (BrokenPipeError, ConnectionResetError):
            closed = True
    assert closed and time.monotonic() - start < 5
    assert read_until_closed(silent, 5) == b""  # one that sends nothing at all
    logged = portal.logged()
    assert logged.count("it sent no whole request headers within 1 s") == 2 and "Traceback" not in logged
    assert httpx.get(portal.base + "/signin").status_code == 200  # the server itself is fine


def start_upload(portal, token: str, declared: int, sent: bytes) -> socket.socket:
    body, content_type = multipart(("challenge", None, b"big"), ("archive", b"slow-entry.tar.gz", sent))
    sock = connect(portal.port)
    sock.sendall(f"POST /api/entries HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Type: "
                 f"{content_type}\r\nContent-Length: {declared}\r\n\r\n".encode() + body[:-40])  # no closing boundary
    return sock


def test_a_stalled_upload_is_cut_off_its_file_removed_and_it_holds_the_owners_one_turn(served):
    web, portal = served
    alice, bob = web.owners.add("alice"), web.owners.add("bob")
    stalled = start_upload(portal, alice, 900_000, b"\x1f\x8b" + b"\0" * 70_000)
    wait_for(lambda: any(p.is_file() for p in web.uploads_left()), 10, "the upload's temporary file")

    def send(token: str):
        with web.tar("t-entry.tar.gz").open("rb") as f:
            return httpx.post(portal.base + "/api/entries", data={"challenge": "big"}, timeout=30,
                              files={"archive": ("t-entry.tar.gz", f)}, headers={"Authorization": f"Bearer {token}"})

    second = send(alice)
    assert second.status_code == 429 and second.json()["error"] == (
        "alice already has an upload in progress: wait until it has been answered, then send the next.")
    assert send(bob).status_code == 201  # another owner is not held up
    answer = read_until_closed(stalled, 10)
    assert answer.startswith(b"HTTP/1.1 408 ") and b"Nothing of the request arrived for 3 seconds" in answer
    assert web.uploads_left() == [] and failed_uploads(web, "alice") == 1
    assert send(alice).status_code == 201  # the turn is free again
    logged = portal.logged()
    assert "stopped sending its body to POST /api/entries for 3 s: cut off" in logged and "Traceback" not in logged


def test_a_client_that_goes_away_mid_upload_leaves_no_file_and_one_log_line(served):
    web, portal = served
    sock = start_upload(portal, web.owners.add("alice"), 900_000, b"\x1f\x8b" + b"\0" * 70_000)
    wait_for(lambda: any(p.is_file() for p in web.uploads_left()), 10, "the upload's temporary file")
    sock.close()
    wait_for(lambda: web.uploads_left() == [], 10, "the temporary file's removal")
    wait_for(lambda: "the client went away during POST /api/entries" in portal.logged(), 10, "the log line")
    logged = portal.logged()
    assert "Traceback" not in logged and "the portal failed" not in logged


def test_the_limits_hold_across_two_portal_processes_on_one_postgresql_queue(tmp_path, pg_url):
    """Two processes, two homes, one queue. An owner with 1 of challenge rl's 2 entries an hour
    sends one upload to each process, and both reach the queue while the test holds the entries
    table against inserts: both have counted by the time it lets go unless the second waited
    for the first's transaction (the advisory lock per challenge and owner). Exactly one is
    accepted. Then an owner whose two failed uploads went one to each process is refused by both
    ([web] failed_uploads_per_hour = 2)."""
    web = with_site(WebHome(tmp_path, pg_url), "[web]\nfailed_uploads_per_hour = 2\n")
    other = tmp_path / "b"
    other.mkdir()
    (other / "site.toml").write_text(f'[queue]\nurl = "{pg_url}"\nhost = "b"\n'  # another host's home
                                     "[web]\nfailed_uploads_per_hour = 2\n")
    token = web.owners.add("alice")
    archives = [web.tar(f"{k}-entry.tar.gz", good_files(str(k))) for k in range(3)]

    def send(portal, archive: Path, challenge: str = "rl", owner: str = token) -> httpx.Response:
        with archive.open("rb") as f:
            return httpx.post(portal.base + "/api/entries", data={"challenge": challenge}, timeout=60,
                              files={"archive": (archive.name, f)}, headers={"Authorization": f"Bearer {owner}"})

    def waiting_on_locks() -> int:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                "AND wait_event_type = 'Lock'").fetchone()[0]

    with running_portal(web.home, tmp_path / "a.log") as a, running_portal(other, tmp_path / "b.log") as b:
        assert send(a, archives[0]).status_code == 201
        with ThreadPoolExecutor(2) as pool, psycopg.connect(pg_url) as holder:
            holder.execute("LOCK TABLE entries IN EXCLUSIVE MODE")  # reads go on, inserts wait
            sent = [pool.submit(send, a, archives[1]), pool.submit(send, b, archives[2])]
            wait_for(lambda: waiting_on_locks() == 2, 30, "both admissions reaching the queue")
            holder.commit()
            codes = sorted(f.result().status_code for f in sent)
        assert codes == [201, 429]
        broken = web.archives / "x-entry.zip"
        broken.write_bytes(b"PK\x03\x04 not a zip")
        failing = web.owners.add("failing")
        assert [send(p, archive, "big", failing).status_code for p, archive in
                ((a, broken), (b, broken), (a, archives[0]), (b, archives[0]))] == [400, 400, 429, 429]
    assert sorted(e.owner for e in web.queue.entries()) == ["alice", "alice"]


def descendants(pid: int) -> set[int]:
    """Every process below `pid`, from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_portal_killed_outright_leaves_no_check_worker_behind(tmp_path):
    web = WebHome(tmp_path)
    token = web.owners.add("alice")
    with running_portal(web.home, tmp_path / "portal.log") as portal:
        with web.tar("a-entry.tar.gz").open("rb") as f:
            assert httpx.post(portal.base + "/api/entries", data={"challenge": "big"}, timeout=60,
                              files={"archive": ("a-entry.tar.gz", f)},
                              headers={"Authorization": f"Bearer {token}"}).status_code == 201
        helpers = descendants(portal.proc.pid)  # the forkserver, its check worker, the resource tracker
        assert len(helpers) >= 2
        portal.proc.kill()
        portal.proc.wait(timeout=30)
        wait_for(lambda: not any(alive(pid) for pid in helpers), 30, "the check workers' end")
