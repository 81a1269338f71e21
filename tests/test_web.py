"""The participants' portal over HTTP (starlette's TestClient on the real app, a real queue in
a temp home, real owners; no VM): signing in, who may see what, CSRF, size and rate limits,
the same admission as `vmjudge submit`, and the JSON API."""

from __future__ import annotations

import html
import json
import os
import stat
import time
from concurrent.futures import ThreadPoolExecutor
from unittest import mock

import anyio
import pytest

from vmjudge.config import load_challenge
from vmjudge.errors import ConfigError
from vmjudge.queue import db as db_module
from vmjudge.queue.failed_uploads import FailedUploads
from vmjudge.reports.report import show
from vmjudge.web.security import CSP

from .test_config import challenge_dir
from .web_home import WebHome, csrf_of, good_files, sign_in, upload


@pytest.fixture
def web(tmp_path) -> WebHome:
    return WebHome(tmp_path)


def signed_in(web: WebHome, name: str, organiser: bool = False):
    client = web.client()
    assert sign_in(client, web.owners.add(name, organiser)).status_code == 303
    return client


def test_signing_in_with_a_token_opens_my_entries_and_the_cookie_is_guarded(web):
    token = web.owners.add("alice")
    client = web.client()
    assert client.get("/entries").status_code == 401
    signed = sign_in(client, token)
    assert signed.status_code == 303 and signed.headers["location"] == "/entries"
    cookie = signed.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "secure" not in cookie  # --no-secure-cookies
    page = client.get("/entries")
    assert page.status_code == 200 and "alice" in page.text and "No entries yet." in page.text
    signed_out = client.post("/signout", data={"csrf": csrf_of(client, "/entries")})
    assert signed_out.status_code == 303 and client.get("/entries").status_code == 401

    secure = web.app(secure_cookies=True)
    from starlette.testclient import TestClient
    with TestClient(secure, base_url="https://testserver", follow_redirects=False) as tls:
        assert "; secure" in sign_in(tls, web.owners.add("bob")).headers["set-cookie"].lower()


def test_a_wrong_or_revoked_token_signs_no_one_in_and_revoking_ends_live_sessions(web):
    token = web.owners.add("alice")
    client = web.client()
    wrong = sign_in(client, token[:-1] + ("A" if token[-1] != "A" else "B"))
    assert wrong.status_code == 401 and "does not sign anyone in" in wrong.text
    assert client.get("/entries").status_code == 401
    assert sign_in(client, token).status_code == 303 and client.get("/entries").status_code == 200
    web.owners.revoke("alice")
    assert client.get("/entries").status_code == 401  # the live session ended with the token
    assert sign_in(client, token).status_code == 401
    api = web.client().get("/api/entries", headers={"Authorization": f"Bearer {token}"})
    assert api.status_code == 401 and "does not sign anyone in" in api.json()["error"]
    new = web.owners.add("alice")  # a session of the old token stays out even once the name is back
    assert client.get("/entries").status_code == 401 and sign_in(web.client(), new).status_code == 303


def test_another_owners_entry_is_not_found_as_if_it_did_not_exist(web):
    alice, bob = signed_in(web, "alice"), signed_in(web, "bob")
    assert upload(alice, web.tar("a-entry.tar.gz")).status_code == 201
    entry_id = web.queue.entries()[0].id
    assert alice.get(f"/entries/{entry_id}").status_code == 200
    theirs, missing = bob.get(f"/entries/{entry_id}"), bob.get("/entries/999999")
    assert theirs.status_code == missing.status_code == 404
    assert "alice" not in theirs.text and "a-entry" not in theirs.text
    bob_token = web.owners.add("bob2")
    api = web.client().get(f"/api/entries/{entry_id}", headers={"Authorization": f"Bearer {bob_token}"})
    assert api.status_code == 404 and api.json() == {"error": f"You have no entry {entry_id}."}


@pytest.mark.parametrize("csrf", [None, "not-the-token"])
def test_a_form_without_its_csrf_token_is_refused_and_nothing_stored(web, csrf):
    alice = signed_in(web, "alice")
    refused = upload(alice, web.tar("a-entry.tar.gz"), csrf=csrf)
    assert refused.status_code == 403 and "safety token" in refused.text
    assert web.queue.entries() == [] and web.spooled() == [] and web.uploads_left() == []
    assert FailedUploads(web.queue.database).last_hour("alice") == 0  # a forged form costs alice nothing
    token = web.owners.add("carol")
    signin = web.client().post("/signin", data={"token": token} | ({"csrf": csrf} if csrf else {}))
    assert signin.status_code == 403 and "set-cookie" not in signin.headers
    assert alice.post("/signout", data={}).status_code == 403 and alice.get("/entries").status_code == 200


ARCHIVE_PART = (b'--x\r\nContent-Disposition: form-data; name="archive"; filename="a-entry.zip"\r\n'
                b"Content-Type: application/zip\r\n\r\n")


CHALLENGE_PART = b'--x\r\nContent-Disposition: form-data; name="challenge"\r\n\r\nbig\r\n'


def asgi_post(app, path: str, headers: list[tuple[bytes, bytes]], chunks: int, size: int = 64 << 10,
              first: bytes = ARCHIVE_PART) -> tuple[int, int]:
    """POST to the app at the ASGI boundary: a multipart body whose archive part is `chunks`
    chunks of `size` bytes, each sent only when the app asks for it. (status, bytes read)."""
    consumed, status = 0, 0
    sent = 0

    async def receive():
        nonlocal consumed, sent
        if sent == chunks:
            return {"type": "http.disconnect"}
        body = (first if sent == 0 else b"") + b"x" * size
        sent += 1
        consumed += len(body)
        return {"type": "http.request", "body": body, "more_body": sent < chunks}

    async def send(message):
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(b"host", b"testserver"), *headers], "client": ("127.0.0.1", 1), "server": ("testserver", 80)}
    anyio.run(app, scope, receive, send)
    return status, consumed


def test_an_oversized_upload_is_refused_before_its_body_is_read(web):
    app = web.app()
    cap = 1048576 + 64 * 1024  # the largest archive any challenge takes ("big"), and the form around it
    for path in ("/upload", "/api/entries", "/signin"):
        status, consumed = asgi_post(app, path, [(b"content-length", str(cap + 1).encode()),
                                                 (b"content-type", b"multipart/form-data; boundary=x")], chunks=100)
        assert (status, consumed) == (413, 0), path
    # No Content-Length (chunked): counted as it streams, stopped just past the challenge's cap.
    status, consumed = asgi_post(app, "/api/entries", [(b"content-type", b"multipart/form-data; boundary=x"),
                                                       (b"authorization", b"Bearer " + web.owners.add("a").encode())],
                                 chunks=1000, first=CHALLENGE_PART + ARCHIVE_PART)
    assert status == 413 and 1048576 < consumed <= 1048576 + 64 * 1024 + len(CHALLENGE_PART + ARCHIVE_PART)
    status, consumed = asgi_post(app, "/signin", [(b"content-type", b"application/x-www-form-urlencoded")], chunks=50,
                                 size=4096)
    assert status == 413 and consumed <= 16 * 1024 + 4096
    assert web.uploads_left() == [] and web.spooled() == []


def test_an_archive_over_its_challenges_cap_is_stopped_as_it_streams(web):
    alice = signed_in(web, "alice")
    big = web.zip("a-entry.zip", {"setup.sh": b"true\n", "next.sh": os.urandom(200_000).replace(b"\r", b"")})
    refused = upload(alice, big, challenge="adm")
    assert refused.status_code == 413 and "over the 65,536 bytes that adm accepts" in refused.text
    assert web.queue.entries() == [] and web.spooled() == [] and web.uploads_left() == []
    assert upload(alice, big, challenge="big").status_code == 201  # within big's cap: the same bytes taken


def submit_says(web: WebHome, archive, challenge: str = "adm", owner: str = "alice") -> tuple[int, str, str]:
    proc = web.vmjudge("submit", challenge, str(archive), "--owner", owner)
    return proc.returncode, proc.stdout.strip(), proc.stderr.strip()


def test_malformed_and_traversal_archives_get_what_submit_says(web):
    alice = signed_in(web, "alice")
    api_token = web.owners.add("bob")
    malformed = web.archives / "m-entry.zip"
    malformed.write_bytes(b"PK\x03\x04 not a zip at all")
    code, _, said = submit_says(web, malformed, owner="carol")
    assert code == 1 and said.startswith("vmjudge: m-entry.zip is not a readable zip archive")
    page = upload(alice, malformed)
    assert page.status_code == 400 and said.removeprefix("vmjudge: ") in html.unescape(page.text)
    with malformed.open("rb") as f:
        api = web.client().post("/api/entries", data={"challenge": "adm"}, files={"archive": f},
                                headers={"Authorization": f"Bearer {api_token}"})
    assert api.status_code == 400 and api.json() == {"error": said.removeprefix("vmjudge: ")}
    assert web.queue.entries() == [] and web.spooled() == []

    # Every member is checked at upload, as stage 1 checks it (#58): a traversal archive is refused by both,
    # with the same sentence, and nothing is stored.
    traversal = web.tar("t-entry.tar.gz", {"../../etc/x": b"x", "setup.sh": b"", "next.sh": b""})
    code, _, said = submit_says(web, traversal, owner="carol")
    assert code == 1 and "climbs out of the entry with '..'" in said
    page = upload(alice, traversal)
    assert page.status_code == 400 and said.removeprefix("vmjudge: ") in html.unescape(page.text)
    assert web.queue.entries() == [] and web.spooled() == []


def test_the_entry_limit_refuses_with_submits_sentence_and_stores_nothing(web):
    alice = signed_in(web, "alice")
    assert upload(alice, web.tar("a-entry.tar.gz")).status_code == 201
    code, _, said = submit_says(web, web.tar("b-entry.tar.gz"))
    assert code == 1 and "has used the 1 scored entry allowed for adm" in said
    spooled = web.spooled()
    refused = upload(alice, web.tar("c-entry.tar.gz"))
    assert refused.status_code == 409
    assert said.removeprefix("vmjudge: ") in html.unescape(refused.text)
    assert len(web.queue.entries()) == 1 and web.spooled() == spooled


def test_a_spent_vm_budget_refuses_with_409_and_submits_sentence_and_stores_nothing(web):
    bud = web.root / "bud"
    bud.mkdir()
    (bud / "challenge.toml").write_text('name = "bud"\n[entry]\nmax_size = 65536\n[limits]\nvm_hours = 0.01\n')
    web.queue.add_challenge("bud", bud, "key")
    alice = signed_in(web, "alice")
    api_token = web.owners.add("api-alice")
    clock = [time.time()]
    for owner in ("alice", "api-alice"):  # each spends the 36 s of its budget on one entry
        code, entry_id, _ = submit_says(web, web.tar(f"{owner}-entry.tar.gz"), challenge="bud", owner=owner)
        assert code == 0
        with mock.patch.object(db_module.time, "time", lambda: clock[0]):
            run = web.queue.start_stage(web.queue.claim_next(only=int(entry_id)).id, "prep", 0)
            clock[0] += 36
            web.queue.finish_stage(run, "failed", "x", {}, outcome="failed", reason="setup-error")
    code, _, said = submit_says(web, web.tar("b-entry.tar.gz"), challenge="bud")
    assert code == 1 and "alice has used the 0.01 h of VM time allowed for bud: no further entry" in said
    spooled, entries = web.spooled(), len(web.queue.entries())
    refused = upload(alice, web.tar("c-entry.tar.gz"), challenge="bud")
    assert refused.status_code == 409 and said.removeprefix("vmjudge: ") in html.unescape(refused.text)
    with web.tar("d-entry.tar.gz").open("rb") as f:
        api = web.client().post("/api/entries", data={"challenge": "bud"}, files={"archive": f},
                                headers={"Authorization": f"Bearer {api_token}"})
    assert api.status_code == 409
    assert api.json() == {"error": said.removeprefix("vmjudge: ").replace("alice", "api-alice")}
    assert len(web.queue.entries()) == entries and web.spooled() == spooled


def test_the_rate_limit_counts_the_queues_entries_across_restarts(web):
    alice = signed_in(web, "alice")
    for i in range(2):
        assert upload(alice, web.tar(f"{i}-entry.tar.gz"), challenge="rl").status_code == 201
    refused = upload(alice, web.tar("2-entry.tar.gz"), challenge="rl")
    assert refused.status_code == 429 and "has submitted 2 entries to rl in the last hour" in refused.text
    restarted = web.client()  # a new app on the same home: the count is the queue's, not the process's
    assert sign_in(restarted, web.owners.add("alice2")).status_code == 303
    token = web.owners.add("api-alice")
    with web.queue.database.transaction() as db:  # two entries of api-alice an hour ago and a minute ago
        for at in ("2000-01-01T00:00:00Z", None):
            db.execute("INSERT INTO entries (challenge, owner, archive_sha256, archive_name, archive_path, "
                       "submitted_at, state, stage) VALUES ('rl', 'api-alice', 'x', 'x-entry.zip', '/x', "
                       "COALESCE(?, ?), 'done', NULL)", (at, "2999-01-01T00:00:00Z"))
    with web.tar("3-entry.tar.gz").open("rb") as f:
        api = restarted.post("/api/entries", data={"challenge": "rl"}, files={"archive": f},
                             headers={"Authorization": f"Bearer {token}"})
    assert api.status_code == 201  # one entry in the last hour (the one of 2000 is long past)
    with web.tar("4-entry.tar.gz").open("rb") as f:
        api = restarted.post("/api/entries", data={"challenge": "rl"}, files={"archive": f},
                             headers={"Authorization": f"Bearer {token}"})
    assert api.status_code == 429 and "api-alice has submitted 2 entries" in api.json()["error"]
    assert upload(restarted, web.tar("5-entry.tar.gz"), challenge="big").status_code == 201  # per challenge


def test_uploads_sent_at_once_cannot_overshoot_the_rate_limit(web):
    """The count and the new entry are one admission: six uploads at once, two accepted."""
    token = web.owners.add("burst")
    archives = [web.tar(f"b{i}-entry.tar.gz", good_files(marker=str(i))) for i in range(6)]

    def send(archive):
        with archive.open("rb") as f:
            return web.client().post("/api/entries", data={"challenge": "rl"}, files={"archive": f},
                                     headers={"Authorization": f"Bearer {token}"}).status_code

    with ThreadPoolExecutor(6) as pool:
        codes = sorted(pool.map(send, archives))
    assert codes == [201, 201, 429, 429, 429, 429]
    assert len([e for e in web.queue.entries() if e.owner == "burst"]) == 2


@pytest.mark.parametrize("key, default", [("submissions_per_hour", 10), ("pending_per_owner", 3),
                                          ("spool_bytes_per_owner", 1 << 30)])
def test_the_portals_limits_are_on_by_default_and_validated_like_the_others(tmp_path, key, default):
    assert getattr(load_challenge(challenge_dir(tmp_path, 'name = "x"\n')).limits, key) == default
    for bad in ("0", '"5"', "2.5", "true", "-1"):
        with pytest.raises(ConfigError, match=rf"\[limits\] {key} = .* is not allowed: use a (whole number|number of "
                                              r"bytes) from 1 to \d+\.$"):
            load_challenge(challenge_dir(tmp_path, f'name = "x"\n[limits]\n{key} = {bad}\n'))
    assert getattr(load_challenge(challenge_dir(tmp_path, f'name = "x"\n[limits]\n{key} = 7\n')).limits, key) == 7


def test_organiser_pages_are_not_found_for_participants(web):
    alice, olga = signed_in(web, "alice"), signed_in(web, "olga", organiser=True)
    assert upload(alice, web.tar("a-entry.tar.gz")).status_code == 201
    assert upload(olga, web.tar("o-entry.tar.gz"), challenge="big").status_code == 201
    entry_id = web.queue.entries()[0].id
    pages = ("/organiser/entries", "/organiser/parked", f"/organiser/entries/{entry_id}",
             f"/organiser/entries/{entry_id}/logs")
    for path in pages:
        assert alice.get(path).status_code == 404, path
        assert olga.get(path).status_code == 200, path
        assert web.client().get(path).status_code == 401, path
    listed = olga.get("/organiser/entries?owner=alice").text
    assert "entry-1" in listed and "entry-2" not in listed
    assert "entry-2" in olga.get("/organiser/entries?challenge=big").text
    assert "No entries match." in olga.get("/organiser/entries?state=done").text
    assert olga.get("/organiser/entries?state=bogus").status_code == 400
    detail = olga.get(f"/organiser/entries/{entry_id}").text
    assert "submitted" in detail and "Attempts" in detail


def test_the_api_takes_a_bearer_token_and_never_a_cookie_alone(web):
    token = web.owners.add("alice")
    bearer = {"Authorization": f"Bearer {token}"}
    client = web.client()
    with web.tar("a-entry.tar.gz").open("rb") as f:
        made = client.post("/api/entries", data={"challenge": "adm", "late": "1"}, files={"archive": f},
                           headers=bearer)
    assert made.status_code == 201, made.text
    entry_id = made.json()["id"]
    assert made.json()["remaining"] == "0 scored entries remain for alice on the late board"
    assert [e["id"] for e in client.get("/api/entries", headers=bearer).json()["entries"]] == [entry_id]
    doc = client.get(f"/api/entries/{entry_id}", headers=bearer).json()
    assert doc == json.loads(json.dumps(show(web.site, web.queue, entry_id))) and "organiser" not in doc
    assert doc["late"] is True

    assert sign_in(client, token).status_code == 303 and client.get("/entries").status_code == 200
    for method, path in (("GET", "/api/entries"), ("GET", f"/api/entries/{entry_id}"), ("POST", "/api/entries")):
        refused = client.request(method, path)  # the session cookie is sent, and is not enough
        assert refused.status_code == 401 and "Bearer" in refused.json()["error"], path
        assert refused.headers["www-authenticate"] == "Bearer"
    assert client.get("/api/entries", headers={"Authorization": "Bearer nope"}).status_code == 401
    missing = client.post("/api/entries", data={"challenge": "nope"}, files={"archive": ("x-entry.zip", b"")},
                          headers=bearer)
    assert missing.status_code == 400 and missing.json()["error"].startswith("There is no challenge named 'nope'")


def test_every_response_carries_the_safety_headers_and_errors_are_one_sentence(web):
    alice = signed_in(web, "alice")
    for response in (alice.get("/entries"), alice.get("/static/entries.js"), alice.get("/nowhere"),
                     alice.put("/entries"), web.client().get("/api/entries"), alice.get("/entries?page=x")):
        assert response.headers["content-security-policy"] == CSP
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "no-referrer"
        assert "Traceback" not in response.text
    assert CSP == ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
                   "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
    assert alice.get("/nowhere").status_code == 404 and alice.put("/entries").status_code == 405
    assert "<script>" not in alice.get("/entries").text.replace('<script src="/static/entries.js" defer>', "")


def test_entry_output_in_pages_is_escaped_and_made_printable(web):
    alice = signed_in(web, "alice")
    name = "<img src=x onerror=alert(1)>-entry.tar.gz"
    assert upload(alice, web.tar(name)).status_code == 201
    entry = web.queue.entries()[0]
    run = web.queue.claim_next()
    assert run is not None
    stage = web.queue.start_stage(entry.id, "prep", 0)
    web.queue.finish_stage(stage, "failed", "setup.sh said \x1b[2J<script>alert(1)</script>\u202eevil", {},
                           reason="setup-error", outcome="failed")
    report = alice.get(f"/entries/{entry.id}").text
    assert "<script>alert" not in report and "<img src=x" not in report
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in report and "\\x1b[2J" in report and "\\u202eevil" in report
    assert "\x1b" not in report and "\u202e" not in report
    assert "&lt;img src=x onerror=alert(1)&gt;" in alice.get("/entries").text


def test_my_entries_are_paged_and_the_page_refreshes_from_json(web):
    alice = signed_in(web, "alice")
    with web.queue.database.transaction() as db:
        for i in range(30):
            db.execute("INSERT INTO entries (challenge, owner, archive_sha256, archive_name, archive_path, "
                       "submitted_at, state, stage) VALUES ('big', 'alice', 'x', ?, '/x', '2026-01-01T00:00:00Z', "
                       "'queued', 'prep')", (f"{i}-entry.zip",))
    first, second = alice.get("/entries"), alice.get("/entries?page=2")
    assert first.text.count('<tr id="entry-') == 25 and second.text.count('<tr id="entry-') == 5
    assert "Page 1 of 2 (30 entries)" in first.text
    doc = alice.get("/entries.json?page=2").json()
    assert doc["total"] == 30 and len(doc["entries"]) == 5
    assert doc["entries"][0]["verdict"] == "Evaluation in progress (queued, stage prep)."
    assert 'src="/static/entries.js"' in first.text and "fetch(\"/entries.json" in alice.get("/static/entries.js").text


def test_the_session_key_is_made_once_private_and_kept_across_restarts(web):
    token = web.owners.add("alice")
    first = web.client()
    assert sign_in(first, token).status_code == 303
    key = web.home / "web-session.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    made = key.read_text()
    again = web.client()  # a restarted portal: the same key, so the same cookie still signs alice in
    again.cookies = first.cookies
    assert again.get("/entries").status_code == 200 and key.read_text() == made


def test_leaderboards_show_the_boards_of_reports_leaderboard(web):
    alice = signed_in(web, "alice")
    boards = alice.get("/leaderboards").text
    assert "/leaderboards/adm" in boards and "/leaderboards/big?late=1" in boards
    assert "No scored entries yet." in alice.get("/leaderboards/adm").text
    assert "adm late leaderboard" in alice.get("/leaderboards/adm?late=1").text
    assert alice.get("/leaderboards/nope").status_code == 404


def test_vmjudge_web_refuses_a_bad_listen_address_in_one_sentence(web):
    proc = web.vmjudge("web", "--listen", "nowhere")
    assert proc.returncode == 1 and proc.stderr == ("vmjudge: --listen 'nowhere' is not an address vmjudge reads: "
                                                    "give HOST:PORT, such as 127.0.0.1:8080.\n")


def test_the_portal_on_both_backends_signs_in_admits_lists_and_rate_limits(tmp_path, queue_location):
    web = WebHome(tmp_path, queue_location)
    alice = signed_in(web, "alice")
    for i in range(2):
        assert upload(alice, web.tar(f"{i}-entry.tar.gz"), challenge="rl").status_code == 201
    assert upload(alice, web.tar("2-entry.tar.gz"), challenge="rl").status_code == 429
    doc = alice.get("/entries.json").json()
    assert doc["total"] == 2 and [e["challenge"] for e in doc["entries"]] == ["rl", "rl"]
    web.owners.revoke("alice")
    assert alice.get("/entries").status_code == 401
