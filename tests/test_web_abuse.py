"""The portal under abuse (issue 31): what a hostile participant sends gets one sentence and its
status, never a 500 and a traceback; the owner who asks pays for the checks; sign-out ends the
session; slow clients are cut off. starlette's TestClient on the real app where the server
plays no part; a real `vmjudge web` process (web_process.py) where it does."""

from __future__ import annotations

import html
import logging

import pytest

from .web_home import WebHome, csrf_of, multipart, sign_in


@pytest.fixture
def web(tmp_path) -> WebHome:
    return WebHome(tmp_path)


def signed_in(web: WebHome, name: str, organiser: bool = False):
    client = web.client()
    assert sign_in(client, web.owners.add(name, organiser)).status_code == 303
    return client


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
