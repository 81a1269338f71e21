"""The portal under abuse (issue 31): what a hostile participant sends gets one sentence and its
status, never a 500 and a traceback; the owner who asks pays for the checks; sign-out ends the
session; slow clients are cut off. starlette's TestClient on the real app where the server
plays no part; a real `vmjudge web` process (web_process.py) where it does."""

from __future__ import annotations

import html
import io
import logging
import os
import tarfile
import time
from pathlib import Path

import anyio
import pytest

from vmjudge.config import load_site
from vmjudge.queue.failed_uploads import FailedUploads

from .test_web import signed_in
from .web_home import WebHome, csrf_of, multipart, sign_in


@pytest.fixture
def web(tmp_path) -> WebHome:
    return WebHome(tmp_path)


def no_trouble_logged(caplog) -> None:
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert not any(r.exc_info for r in caplog.records)


@pytest.mark.parametrize("filename", ["a\u202egpj-entry.zip".encode(), b"a\x00-entry.zip", b"a" * 254 + b"-entry.zip",
                                      "é".encode() * 240 + b"-entry.zip"],
                         ids=["bidi", "nul", "263-characters", "480-bytes"])
def test_a_bad_archive_name_is_a_400_with_its_sentence(web, caplog, filename):
    token = web.owners.add("alice")
    body, content_type = multipart(("challenge", None, b"big"), ("archive", filename, b"PK\x05\x06" + b"\0" * 18))
    with caplog.at_level(logging.INFO):
        answer = web.client().post("/api/entries", content=body, headers={"Authorization": f"Bearer {token}",
                                                                          "Content-Type": content_type})
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"].endswith("is not allowed: use at most 255 bytes of printable characters (no control "
                                           "characters, newlines or invisible formatting) and submit again.")
    no_trouble_logged(caplog)
    assert web.uploads_left() == [] and web.spooled() == [] and web.queue.entries() == []


@pytest.mark.parametrize("number", ["99999999999999999999999", "9" * 5000, "١٢"])
def test_an_entry_number_no_entry_can_have_is_not_found(web, caplog, number):
    alice = signed_in(web, "alice")
    olga = signed_in(web, "olga", organiser=True)
    token = web.owners.add("bob")
    with caplog.at_level(logging.INFO):
        answers = [alice.get(f"/entries/{number}"), olga.get(f"/organiser/entries/{number}"),
                   olga.get(f"/organiser/entries/{number}/logs"),
                   web.client().get(f"/api/entries/{number}", headers={"Authorization": f"Bearer {token}"})]
    assert [a.status_code for a in answers] == [404, 404, 404, 404]
    assert answers[-1].json()["error"].startswith("You have no entry ")
    assert "Traceback" not in "".join(a.text for a in answers)
    no_trouble_logged(caplog)


@pytest.mark.parametrize("page", ["²", "1" * 5000, "-1", "0", "1.0"])
def test_a_page_number_is_ascii_digits(web, caplog, page):
    alice = signed_in(web, "alice")
    token = web.owners.add("bob")
    with caplog.at_level(logging.INFO):
        answers = [alice.get("/entries", params={"page": page}), alice.get("/entries.json", params={"page": page}),
                   web.client().get("/api/entries", params={"page": page},
                                    headers={"Authorization": f"Bearer {token}"})]
    assert [a.status_code for a in answers] == [400, 400, 400]
    assert "is not a page number: give a whole number from 1 to 1000000." in html.unescape(answers[0].text)
    no_trouble_logged(caplog)


def test_unknown_pages_and_methods_are_sentences(web):
    alice = signed_in(web, "alice")
    assert "There is no such page: check the address." in alice.get("/nowhere").text
    refused = web.client().put("/api/entries")
    assert refused.status_code == 405 and refused.json()["error"].startswith("This page does not take that kind")
    assert csrf_of(alice, "/upload")


def test_signing_out_ends_the_session_on_the_server_not_only_in_the_browser(web):
    token = web.owners.add("alice")
    browser, other_device = web.client(), web.client()
    assert sign_in(browser, token).status_code == 303 and sign_in(other_device, token).status_code == 303
    saved = dict(browser.cookies)  # what a copy of the cookie (a stolen one, another tab's) holds
    assert browser.post("/signout", data={"csrf": csrf_of(browser, "/entries")}).status_code == 303
    replayed = web.client()
    replayed.cookies.update(saved)
    assert replayed.get("/entries").status_code == 401
    assert other_device.get("/entries").status_code == 401  # every session begun before signing out
    assert sign_in(browser, token).status_code == 303 and browser.get("/entries").status_code == 200
    assert replayed.get("/entries").status_code == 401  # signing in again does not revive the old one


def tar_bomb(path: Path, zeros: int) -> bytes:
    """A tar.gz whose one member is `zeros` zero bytes: small to send, long to list (listing a
    tar.gz decompresses all of it)."""
    with tarfile.open(path, "w:gz", compresslevel=9) as tf:
        info = tarfile.TarInfo("setup.sh")
        info.size = zeros
        tf.addfile(info, io.BytesIO(bytes(zeros)))
    return path.read_bytes()


def asgi_send(app, path: str, headers: dict[str, str], chunks: list[bytes]) -> tuple[int, int]:
    """POST `chunks` to the app at the ASGI boundary, each only when the app asks for the next:
    (status, bytes the app read)."""
    read, status, sent = 0, 0, 0

    async def receive():
        nonlocal read, sent
        if sent == len(chunks):
            return {"type": "http.disconnect"}
        sent += 1
        read += len(chunks[sent - 1])
        return {"type": "http.request", "body": chunks[sent - 1], "more_body": sent < len(chunks)}

    async def send(message):
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "", "server": ("t", 80),
             "headers": [(b"host", b"t"), *((k.encode(), v.encode()) for k, v in headers.items())],
             "client": ("127.0.0.1", 1)}
    anyio.run(app, scope, receive, send)
    return status, read


def chunked(body: bytes, size: int = 16 << 10) -> list[bytes]:
    return [body[i:i + size] for i in range(0, len(body), size)]


def failed_uploads(web: WebHome, owner: str) -> int:
    return FailedUploads(web.queue.database).last_hour(owner)


def test_an_owner_at_a_limit_is_refused_before_the_archive_is_stored_or_read(web, tmp_path):
    """The owner at submissions_per_hour = 2 sends a tar bomb: 429 from the first chunk, the rest
    of the body never read, nothing written; the refusal counts as a failed upload."""
    token = web.owners.add("alice")
    for archive in (web.tar("0-entry.tar.gz"), web.tar("1-entry.tar.gz")):
        with archive.open("rb") as f:
            assert web.client().post("/api/entries", data={"challenge": "rl"}, files={"archive": (archive.name, f)},
                                     headers={"Authorization": f"Bearer {token}"}).status_code == 201
    bomb = tar_bomb(tmp_path / "bomb-entry.tar.gz", 48 << 20)
    body, content_type = multipart(("challenge", None, b"rl"), ("archive", b"bomb-entry.tar.gz", bomb))
    status, read = asgi_send(web.app(), "/api/entries", {"authorization": f"Bearer {token}",
                                                        "content-type": content_type}, chunked(body))
    assert status == 429 and read == 16 << 10 < len(body)
    assert web.uploads_left() == [] and len(web.queue.entries()) == 2 and failed_uploads(web, "alice") == 1


def test_entries_waiting_and_spool_bytes_are_capped_per_owner(tmp_path, queue_location):
    web = WebHome(tmp_path, queue_location)
    (tmp_path / "cap").mkdir()
    (tmp_path / "cap" / "challenge.toml").write_text('name = "cap"\n[entry]\nmax_size = 65536\n[limits]\n'
                                                     'pending_per_owner = 2\nspool_bytes_per_owner = 60000\n')
    web.queue.add_challenge("cap", tmp_path / "cap", "key")
    token = web.owners.add("alice")
    bearer = {"Authorization": f"Bearer {token}"}

    def send(name: str, files: dict[str, bytes] | None = None):
        archive = web.tar(name, files)
        with archive.open("rb") as f:
            return web.client().post("/api/entries", data={"challenge": "cap"}, files={"archive": (name, f)},
                                     headers=bearer)

    assert [send(f"{i}-entry.tar.gz").status_code for i in range(2)] == [201, 201]
    waiting = send("2-entry.tar.gz")
    assert waiting.status_code == 429 and waiting.json()["error"] == (
        "alice has 2 entries waiting or running for cap, the most cap takes at once: submit again once one has ended.")
    for _ in range(2):  # both end: places are given back, their archives stay in the spool
        run = web.queue.claim_next()
        assert run is not None
        web.queue.finish_stage(web.queue.start_stage(run.id, "prep", 0), "failed", "x", {}, reason="setup-error",
                               outcome="failed")
    kept = sum(p.stat().st_size for p in web.spooled())
    big = send("3-entry.tar.gz", {"setup.sh": b"true\n", "next.sh": os.urandom(60_000)})  # the room: 60000 - kept
    assert big.status_code == 409 and big.json()["error"].startswith("This archive's ")
    assert f"past the 60,000 bytes of archives cap keeps for one owner ({kept:,} kept)" in big.json()["error"]
    assert send("4-entry.tar.gz").status_code == 201
    assert web.uploads_left() == [] and len(web.spooled()) == 3


def with_site(web: WebHome, text: str) -> WebHome:
    """The home's site.toml with `text` added, read again (as a restarted portal would)."""
    site_toml = web.home / "site.toml"
    site_toml.write_text((site_toml.read_text() if site_toml.exists() else "") + text)
    web.site = load_site(web.home)
    return web


def test_refused_and_failed_uploads_count_and_past_the_limit_even_a_good_one_waits(tmp_path, queue_location):
    web = with_site(WebHome(tmp_path, queue_location), "[web]\nfailed_uploads_per_hour = 3\n")
    token, other = web.owners.add("alice"), web.owners.add("bob")
    broken = web.archives / "b-entry.zip"
    broken.write_bytes(b"PK\x03\x04 not a zip")

    def send(token: str, archive: Path, challenge: str = "adm"):
        with archive.open("rb") as f:
            return web.client().post("/api/entries", data={"challenge": challenge},
                                     files={"archive": (archive.name, f)}, headers={"Authorization": f"Bearer {token}"})

    codes = [send(token, broken).status_code, send(token, broken, "nope").status_code,
             send(token, web.tar("big-entry.tar.gz", {"setup.sh": os.urandom(70_000)})).status_code]
    assert codes == [400, 400, 413] and failed_uploads(web, "alice") == 3
    refused = send(token, web.tar("good-entry.tar.gz"))  # a new app each time: the count is the queue's
    assert refused.status_code == 429 and refused.json()["error"] == (
        "3 of alice's uploads in the last hour were refused or failed, the most the portal takes: check your entries "
        "with the replica and upload again in an hour.")
    assert failed_uploads(web, "alice") == 3  # refused at the door: nothing was read, nothing more is counted
    assert send(other, web.tar("bob-entry.tar.gz")).status_code == 201  # another owner's count is their own
    with web.queue.database.transaction() as db:  # an hour on, alice may try again
        db.execute("UPDATE failed_uploads SET at = at - 3600")
    assert send(token, web.tar("good-entry.tar.gz")).status_code == 201


def test_a_form_of_thousands_of_fields_is_refused_at_the_ninth(web, caplog):
    token = web.owners.add("alice")
    fields = [(f"f{i}", None, b"x" * 4000) for i in range(12_000)]
    body, content_type = multipart(*fields)
    with caplog.at_level(logging.INFO):
        status, read = asgi_send(web.app(), "/api/entries", {"authorization": f"Bearer {token}",
                                                            "content-type": content_type}, chunked(body, 64 << 10))
    assert status == 400 and read == 64 << 10  # the ninth field is in the first 64 KiB: nothing more is read
    no_trouble_logged(caplog)
    refused = web.client().post("/api/entries", content=multipart(*fields[:9])[0], headers={
        "Authorization": f"Bearer {token}", "Content-Type": content_type})
    assert refused.status_code == 400 and refused.json()["error"] == (
        "The form holds more than 8 fields: send only challenge, archive and late (and the page's csrf).")


def test_an_upload_directory_a_crash_left_is_swept_a_day_later(web):
    uploads = web.home / "uploads"
    uploads.mkdir()
    left, live = uploads / "upload-crashed", uploads / "upload-live"
    for d in (left, live):
        d.mkdir()
        (d / "a-entry.zip").write_bytes(b"x")
    day_old = time.time() - 24 * 3600 - 60
    for p in (left, left / "a-entry.zip", live):
        os.utime(p, (day_old, day_old))  # live's archive was written just now
    token = web.owners.add("alice")
    with web.tar("b-entry.tar.gz").open("rb") as f:
        assert web.client().post("/api/entries", data={"challenge": "adm"}, files={"archive": ("b-entry.tar.gz", f)},
                                 headers={"Authorization": f"Bearer {token}"}).status_code == 201
    assert sorted(p.name for p in uploads.iterdir()) == ["upload-live"]
