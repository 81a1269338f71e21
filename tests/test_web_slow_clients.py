"""`vmjudge web` against slow and many clients (issue 54), a real process on loopback: a request's
body has a total deadline (a form) or a minimum rate (an upload), connections are capped per
client address and in all (the total from the process's open-file limit), and accept() failing
for want of descriptors is said once per episode. Some portals are started with RLIMIT_NOFILE
64, as the review's; 127.0.0.2 and the rest of 127/8 are other clients (Linux routes all of it
to loopback). Timeouts are set small in site.toml so that each test takes seconds."""

from __future__ import annotations

import re
import signal
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import pytest

from vmjudge.config import WebSite, load_site
from vmjudge.errors import ConfigError
from vmjudge.web.admission import client_key, per_client

from .test_web_abuse import failed_uploads, with_site
from .test_web_server import read_until_closed
from .waiting import wait_for
from .web_home import WebHome, multipart
from .web_process import Portal, running_portal

SLOW_SIGNIN = (b"POST /signin HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
               b"Content-Length: 10000\r\n\r\n")  # under the 16 KiB a form may have


portal_process = running_portal


def connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
    sock.settimeout(0.1)
    return sock


def page_from(portal: Portal, source: str, path: str = "/signin") -> tuple[int, float]:
    """A plain GET from `source`: its status and how long it took."""
    start = time.monotonic()
    with httpx.Client(transport=httpx.HTTPTransport(local_address=source), timeout=5) as client:
        status = client.get(portal.base + path).status_code
    return status, time.monotonic() - start


def drip(sock: socket.socket, data: bytes) -> bool:
    """Send `data`; False once the server has closed the connection."""
    try:
        sock.sendall(data)
        return True
    except OSError:
        return False


def admitted(port: int, source: str) -> socket.socket:
    """A connection from `source` that the portal has admitted: it answered a page on it, and
    keeps it open (keep-alive). One refused (the portal had not yet counted a connection just
    closed, such as the probe that saw it listening) is tried again."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        sock = connect(port, source)
        sock.sendall(b"GET /signin HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = b""
        while b"</html>" not in answer and not answer.startswith((b"HTTP/1.1 429", b"HTTP/1.1 503")):
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            answer += chunk
            if not chunk:
                break
        if answer.startswith(b"HTTP/1.1 200 "):
            return sock
        sock.close()
    raise AssertionError(f"no connection from {source} admitted within 10 s")


def total_of(portal: Portal) -> int:
    found = re.search(r"serving at most (\d+) connections at once", portal.logged())
    assert found, portal.logged()
    return int(found.group(1))


def test_sixty_slow_bodies_on_64_descriptors_leave_a_page_answered_within_2_s_and_the_log_small(tmp_path):
    """The review's attack: 60 sign-ins whose bodies come a byte every second (well within
    body_timeout, and form_timeout set long so that only the caps can save the page), against
    a portal that may open 64 files. Another client's plain page is answered within 2 s
    throughout, and the log stays small."""
    web = with_site(WebHome(tmp_path), "[web]\nheader_timeout = 5\nbody_timeout = 20\nform_timeout = 60\n"
                                       "connections_per_client = 2\n")
    with portal_process(web.home, tmp_path / "portal.log", files=64) as portal, ExitStack() as held:
        slow = [held.enter_context(connect(portal.port, "127.0.0.3")) for _ in range(60)]
        for sock in slow:
            drip(sock, SLOW_SIGNIN)
        end, times = time.monotonic() + 8, []
        while time.monotonic() < end:
            slow = [sock for sock in slow if drip(sock, b"a")]
            status, took = page_from(portal, "127.0.0.2")
            assert status == 200
            times.append(took)
            time.sleep(1)  # the attacker's pace: a byte a second
        assert max(times) < 2, times
        assert len(slow) >= 2  # the slow ones admitted are still held: the page was served beside them
        logged = portal.logged()
    assert len(logged.encode()) < 100_000 and "Traceback" not in logged
    assert logged.count("127.0.0.3 has 2 connections open, the most one address may have") == 1


def trickle(sock: socket.socket, pieces: Iterator[bytes], every: float, seconds: float) -> tuple[bytes, float]:
    """Send the next piece every `every` seconds until the server answers: all it sends until it
    closes the connection, and how long it took to answer."""
    start = time.monotonic()
    sock.settimeout(every)
    try:
        while time.monotonic() < start + seconds:
            if not drip(sock, next(pieces)):
                return b"", time.monotonic() - start
            try:
                first = sock.recv(65536)  # the pace: waits `every` seconds unless the server answers
            except TimeoutError:
                continue
            except ConnectionResetError:
                return b"", time.monotonic() - start
            took = time.monotonic() - start
            sock.settimeout(0.1)
            return first + read_until_closed(sock, 5), took
    finally:
        sock.settimeout(0.1)
    raise AssertionError(f"the server kept taking the body for {seconds} s")


def test_a_form_whose_body_trickles_is_cut_off_at_its_total_deadline(tmp_path):
    """A byte every 0.5 s, ten times within body_timeout: the sign-in must be whole within
    form_timeout all the same."""
    web = with_site(WebHome(tmp_path), "[web]\nheader_timeout = 2\nbody_timeout = 5\nform_timeout = 3\n")
    with portal_process(web.home, tmp_path / "portal.log") as portal:
        with connect(portal.port) as sock:
            sock.sendall(SLOW_SIGNIN)
            answer, took = trickle(sock, iter(lambda: b"a", None), 0.5, 10)
        logged = portal.logged()
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert b"The request did not arrive whole within 3 seconds: send it again from a steadier connection." in answer
    assert 3 <= took < 3 + 1.5, took
    assert "sent its body to POST /signin too slowly (not whole within [web] form_timeout = 3 s): cut off" in logged
    assert "Traceback" not in logged


def test_an_upload_below_the_minimum_rate_is_cut_off_its_file_removed_and_a_normal_one_still_succeeds(tmp_path):
    """30,000 bytes at once, then 200 bytes every 0.2 s (1,000 bytes/s), against upload_min_rate
    20,000 after a grace of body_timeout (2 s): cut off when the grace ends, the temporary file
    removed, a failed upload of the owner's; then the owner's normal upload is admitted."""
    web = with_site(WebHome(tmp_path), "[web]\nheader_timeout = 2\nbody_timeout = 2\nupload_min_rate = 20000\n")
    alice = web.owners.add("alice")
    body, content_type = multipart(("challenge", None, b"big"),
                                   ("archive", b"slow-entry.tar.gz", b"\x1f\x8b" + b"\0" * 900_000))
    with portal_process(web.home, tmp_path / "portal.log") as portal:
        with connect(portal.port) as sock:
            sock.sendall(f"POST /api/entries HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {alice}\r\nContent-Type: "
                         f"{content_type}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body[:30_000])
            wait_for(lambda: any(p.is_file() for p in web.uploads_left()), 10, "the upload's temporary file")
            answer, took = trickle(sock, (body[k:k + 200] for k in range(30_000, len(body), 200)), 0.2, 10)
        assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
        assert b"below the 20,000 the portal needs: send it again from a faster connection." in answer
        assert took < 2 + 1.5, took
        wait_for(lambda: web.uploads_left() == [], 10, "the temporary file's removal")
        assert failed_uploads(web, "alice") == 1
        with web.tar("good-entry.tar.gz").open("rb") as f:
            whole = httpx.post(portal.base + "/api/entries", data={"challenge": "big"}, timeout=30,
                               files={"archive": ("good-entry.tar.gz", f)},
                               headers={"Authorization": f"Bearer {alice}"})
        assert whole.status_code == 201, whole.text
        logged = portal.logged()
    assert re.search(r"sent its body to POST /api/entries too slowly \([\d,]+ bytes in \d+ s, below \[web\] "
                     r"upload_min_rate = 20,000 bytes/s\): cut off", logged), logged
    assert "Traceback" not in logged and web.uploads_left() == []


def test_the_connection_past_the_cap_of_one_address_is_refused_while_another_address_is_served(tmp_path):
    web = with_site(WebHome(tmp_path), "[web]\nheader_timeout = 30\nconnections_per_client = 3\n")
    with portal_process(web.home, tmp_path / "portal.log") as portal, ExitStack() as held:
        for _ in range(3):  # a websocket upgrade is a plain request: its connection is counted, then given back
            with connect(portal.port, "127.0.0.3") as upgrade:
                upgrade.sendall(b"GET /signin HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                                b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
                upgrade.settimeout(10)
                assert upgrade.recv(65536).startswith(b"HTTP/1.1 200 ")
        three = [held.enter_context(admitted(portal.port, "127.0.0.3")) for _ in range(3)]
        for _ in range(4):  # the fourth, again and again: refused at once, one line in the log
            with connect(portal.port, "127.0.0.3") as fourth:
                answer = read_until_closed(fourth, 2)
            assert answer.startswith(b"HTTP/1.1 429 "), answer
            assert b"Your address has 3 connections open to the portal, the most it allows" in answer
        status, took = page_from(portal, "127.0.0.2")
        assert status == 200 and took < 2
        three.pop().close()
        wait_for(lambda: page_from(portal, "127.0.0.3")[0] == 200, 10, "a connection from 127.0.0.3 served again")
        logged = portal.logged()
    assert logged.count("127.0.0.3 has 3 connections open") == 1 and "Traceback" not in logged
    assert "WebSocket" not in logged and "upgrade" not in logged


def test_past_the_total_the_open_file_limit_allows_new_connections_get_503(tmp_path):
    web = with_site(WebHome(tmp_path), "[web]\nheader_timeout = 30\n")
    with portal_process(web.home, tmp_path / "portal.log", files=64) as portal, ExitStack() as held:
        total = total_of(portal)
        assert 2 <= total <= (64 - 20) // 5  # what 64 descriptors leave room for, 5 a connection
        every = [held.enter_context(admitted(portal.port, f"127.0.1.{i}")) for i in range(total)]
        for i in range(3):
            with connect(portal.port, f"127.0.2.{i}") as late:
                answer = read_until_closed(late, 2)
            assert answer.startswith(b"HTTP/1.1 503 "), answer
            assert b"The portal is serving as many connections as it can just now" in answer
        every.pop().close()
        wait_for(lambda: page_from(portal, "127.0.0.2")[0] == 200, 10, "a page served once one connection closed")
        logged = portal.logged()
    assert logged.count(f"the portal has {total} connections open, the most its open-file limit") == 1
    assert "Traceback" not in logged and "cannot accept connections" not in logged


def burst(portal: Portal, count: int, episode: int) -> None:
    """`count` connections made while the portal is stopped: the kernel queues them, and the
    portal, let go, accepts them in one turn of its event loop, past its open-file limit (the
    `episode`th time it is said)."""
    portal.proc.send_signal(signal.SIGSTOP)
    try:
        with ExitStack() as held:
            for i in range(count):
                held.enter_context(connect(portal.port, f"127.0.3.{i % 250 + 1}"))
            portal.proc.send_signal(signal.SIGCONT)
            wait_for(lambda: portal.logged().count("cannot accept connections") == episode, 10, "accept() failing")
    finally:
        portal.proc.send_signal(signal.SIGCONT)


def test_accept_failing_for_want_of_descriptors_is_said_once_per_episode(tmp_path):
    web = with_site(WebHome(tmp_path), "[web]\nheader_timeout = 1\n")
    with portal_process(web.home, tmp_path / "portal.log", files=64) as portal:
        for episode in (1, 2):
            burst(portal, 150, episode)
            wait_for(lambda n=episode: portal.logged().count("the portal accepts connections again") == n, 30,
                     f"the end of episode {episode} said")
        status, took = page_from(portal, "127.0.0.2")
        assert status == 200 and took < 2
        logged = portal.logged()
    assert logged.count("the portal cannot accept connections: Too many open files (its open-file limit, "
                        "RLIMIT_NOFILE, is 64)") == 2
    assert re.search(r"accept\(\) failed \d+ times over \d+ s", logged)
    assert "Traceback" not in logged and len(logged.encode()) < 100_000


def test_a_portal_whose_open_file_limit_leaves_no_room_refuses_to_start(tmp_path):
    web = WebHome(tmp_path)
    with pytest.raises(AssertionError, match="raise the limit to at least"), \
            portal_process(web.home, tmp_path / "portal.log", files=32):
        pass


def test_the_cap_per_address_left_out_is_32_except_on_loopback_where_a_proxy_is_every_client():
    assert [per_client(None, host) for host in ("0.0.0.0", "192.0.2.1", "::", "127.0.0.1", "::1", "localhost")] == [
        32, 32, 32, 0, 0, 0]
    assert per_client(5, "127.0.0.1") == 5 and per_client(0, "0.0.0.0") == 0


def test_a_client_is_its_ipv4_address_or_its_ipv6_64():
    assert client_key(("2001:db8:0:1::5", 4000)) == client_key(("2001:db8:0:1:ffff::9", 1)) == "2001:db8:0:1::/64"
    assert client_key(("2001:db8:0:2::5", 4000)) != client_key(("2001:db8:0:1::5", 4000))
    assert client_key(("::ffff:192.0.2.7", 1)) == client_key(("192.0.2.7", 2)) == "192.0.2.7"


def test_the_new_web_keys_have_defaults_and_bad_values_are_named(tmp_path):
    web = load_site(tmp_path).web
    assert (web.form_timeout, web.upload_min_rate, web.connections_per_client) == (10.0, 10240, None)
    (tmp_path / "site.toml").write_text("[web]\nform_timeout = 4\nupload_min_rate = 500\nconnections_per_client = 0\n")
    assert load_site(tmp_path).web == WebSite(form_timeout=4.0, upload_min_rate=500, connections_per_client=0)
    for text, says in [("form_timeout = 0", "[web] form_timeout = 0 is not allowed: use seconds from 0.5 to 300."),
                       ("upload_min_rate = 0", "[web] upload_min_rate = 0 is not allowed: use bytes a second, a "
                                               "whole number from 1 to 1000000000."),
                       ("connections_per_client = -1", "[web] connections_per_client = -1 is not allowed: use a "
                                                       "whole number from 1 to 100000, or 0 for no cap.")]:
        (tmp_path / "site.toml").write_text(f"[web]\n{text}\n")
        with pytest.raises(ConfigError) as err:
            load_site(tmp_path)
        assert says in str(err.value)
