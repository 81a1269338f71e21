"""Accounts people make on the portal (#58): [portal] registration "closed", "approve" or "open"; the
address confirmed by the link the daemon's own sender mails through a real SMTP server on loopback;
the organisers' approval; signing in by a mailed link that works once; and the limits that keep the
sign-up form from filling a stranger's mailbox."""

from __future__ import annotations

import re
import time

import pytest

from vmjudge.queue.accounts import CONFIRMATION, Accounts
from vmjudge.supervisor.notifier import Notifier
from vmjudge.web import confirm_link
from vmjudge.web.secret import session_key

from .notify_servers import SmtpServer
from .test_notify_confirm import PORTAL_URL, drain, mail_text, notify_toml
from .test_web_abuse import with_site
from .web_home import WebHome, csrf_of, upload

SIGNIN_LINK = re.compile(re.escape(PORTAL_URL) + r"(/signin/link\?token=[A-Za-z0-9_.=-]+)")
CONFIRM_LINK = re.compile(re.escape(PORTAL_URL) + r"(/settings/confirm\?token=[A-Za-z0-9_.=-]+)")


@pytest.fixture
def portal(tmp_path, request):
    registration = getattr(request, "param", "approve")
    with SmtpServer() as server:
        web = with_site(WebHome(tmp_path), notify_toml(server.port) + f'[portal]\nregistration = "{registration}"\n')
        web.smtp, web.notifier = server, Notifier(web.site, web.queue)
        yield web


def sign_up(client, name: str, email: str):
    return client.post("/signup", data={"name": name, "email": email, "csrf": csrf_of(client, "/signup")})


def link(web, pattern: re.Pattern, address: str) -> str:
    drain(web.notifier)
    mails = web.smtp.mailbox.to(address)
    assert mails, f"no mail to {address}"
    found = pattern.search(mail_text(mails[-1]))
    assert found, mail_text(mails[-1])
    return found.group(1)


def confirm(client, path: str):
    page = client.get(path)
    assert page.status_code == 200 and 'id="confirm"' in page.text
    return client.post("/settings/confirm", data={"token": path.split("token=", 1)[1]})


def follow_signin(client, path: str):
    page = client.get(path)
    assert page.status_code == 200, page.text
    return client.post("/signin/link", data={"token": path.split("token=", 1)[1], "csrf": csrf_of(client, path)})


def test_a_person_signs_up_confirms_is_approved_and_signs_in_by_a_mailed_link(portal):
    web = portal
    client = web.client()
    assert 'href="/signup"' in client.get("/signin").text
    made = sign_up(client, "ana-lab", "ana@example.org")
    assert made.status_code == 200 and "A link is on its way to ana@example.org" in made.text
    ana = web.owners.get("ana-lab")
    assert ana.awaiting == CONFIRMATION and ana.confirmed_email is None and not ana.can_sign_in
    # Not yet confirmed: no link to sign in is sent, and the page says the same as for anyone.
    asked = client.post("/signin/mail", data={"email": "ana@example.org", "csrf": csrf_of(client)})
    assert "If an account uses that address" in asked.text
    done = confirm(web.client(), link(web, CONFIRM_LINK, "ana@example.org"))
    assert done.status_code == 200 and "The organisers approve each new account" in done.text
    assert web.owners.get("ana-lab").awaiting == "approval"
    assert len(web.smtp.mailbox.to("ana@example.org")) == 1  # the confirmation only: no sign-in link yet
    # The organisers approve it; the mail says so.
    approved = web.vmjudge("owner", "approve", "ana-lab")
    assert approved.returncode == 0, approved.stderr
    assert "waiting" not in web.vmjudge("owner", "list").stdout
    drain(web.notifier)
    assert web.smtp.mailbox.to("ana@example.org")[-1]["Subject"] == "Your account on the judge is approved"
    # Sign in by a mailed link: once.
    client.post("/signin/mail", data={"email": "ana@example.org", "csrf": csrf_of(client)})
    path = link(web, SIGNIN_LINK, "ana@example.org")
    signed = follow_signin(client, path)
    assert signed.status_code == 303 and signed.headers["location"] == "/entries"
    assert client.get("/entries").status_code == 200
    archive = web.tar("ana-entry.tar.gz")
    assert upload(client, archive).status_code == 201
    other = web.client()
    again = other.post("/signin/link", data={"token": path.split("token=", 1)[1], "csrf": csrf_of(other, path)})
    assert again.status_code == 400 and "has been used" in again.text


@pytest.mark.parametrize("portal", ["open"], indirect=True)
def test_with_open_registration_a_confirmed_address_is_enough(portal):
    web = portal
    client = web.client()
    sign_up(client, "bo", "bo@example.org")
    done = confirm(web.client(), link(web, CONFIRM_LINK, "bo@example.org"))
    assert "Sign in</a> with a link mailed to it" in done.text
    assert web.owners.get("bo").can_sign_in
    client.post("/signin/mail", data={"email": "bo@example.org", "csrf": csrf_of(client)})
    assert follow_signin(client, link(web, SIGNIN_LINK, "bo@example.org")).status_code == 303


@pytest.mark.parametrize("portal", ["closed"], indirect=True)
def test_closed_registration_has_no_sign_up(portal):
    client = portal.client()
    assert client.get("/signup").status_code == 404
    assert 'href="/signup"' not in client.get("/signin").text


def test_a_taken_name_a_bad_name_and_an_address_that_has_an_account(portal):
    web = portal
    web.owners.add("cy", email="cy@example.org")  # the organiser's account, its address trusted
    client = web.client()
    taken = sign_up(client, "cy", "new@example.org")
    assert taken.status_code == 400 and "The name &#39;cy&#39; is taken" in taken.text
    for bad in ("x", "a b", "\u202eevil", "-dash"):
        assert sign_up(client, bad, "new@example.org").status_code == 400
    # Someone signs up with cy's address: the page says what it says to anyone, no account is made,
    # and the mailbox's reader gets a sign-in link to cy's own account.
    same = sign_up(client, "cy-again", "cy@example.org")
    assert same.status_code == 200 and "A link is on its way" in same.text
    assert web.owners.get("cy-again").awaiting == CONFIRMATION  # its name held as any sign-up's, to lapse
    path = link(web, SIGNIN_LINK, "cy@example.org")
    browser = web.client()
    assert follow_signin(browser, path).status_code == 303
    assert "cy" in browser.get("/entries").text


def test_sign_ups_cannot_fill_a_mailbox_or_the_accounts(portal):
    web = portal
    client = web.client()
    for n in range(4):
        assert sign_up(client, f"spam{n}", "victim@example.org").status_code == 200
    drain(web.notifier)
    assert len(web.smtp.mailbox.to("victim@example.org")) == 1  # one mail per address every ten minutes
    with_site(web, "")  # the same site, read again
    accounts = Accounts(web.queue.database)
    for n in range(56):  # with spam0-3 (each holds its name, mailed or not), the hour's 60
        accounts.sign_up(f"many{n}", f"m{n}@example.org", ("s", "t"), None, per_hour=60)
    refused = sign_up(client, "one-more", "late@example.org")
    assert refused.status_code == 429 and "no more sign-ups this hour" in refused.text


def test_an_unconfirmed_sign_up_lapses_and_frees_its_name(portal):
    web = portal
    accounts = Accounts(web.queue.database)
    accounts.sign_up("dee", "dee@example.org", ("s", "t"), None, per_hour=60, at=1000.0)
    with pytest.raises(Exception, match="is taken"):
        accounts.sign_up("dee", "other@example.org", ("s", "t"), None, per_hour=60, at=2000.0)
    accounts.sign_up("dee", "other@example.org", ("s", "t"), None, per_hour=60, at=1000.0 + 2 * 86400)
    assert web.owners.get("dee").email == "other@example.org"


def test_a_sign_in_link_that_is_forged_or_for_an_account_waiting_is_refused(portal):
    web = portal
    client = web.client()
    bad = client.get("/signin/link?token=abc.def.ghi")
    assert bad.status_code == 400 and "not valid" in bad.text
    sign_up(client, "eve", "eve@example.org")
    token = confirm_link.signin_token(session_key(web.home).encode(), "eve")
    browser = web.client()
    page = f"/signin/link?token={token}"
    refused = browser.post("/signin/link", data={"token": token, "csrf": csrf_of(browser, page)})
    assert refused.status_code == 400  # eve has not confirmed her address: a link made for her signs nothing in
    assert browser.get("/entries").status_code == 401
    no_csrf = browser.post("/signin/link", data={"token": token})
    assert no_csrf.status_code == 403


@pytest.mark.parametrize("portal", ["open"], indirect=True)
def test_an_account_made_on_the_portal_makes_its_api_token_on_settings(portal):
    web = portal
    client = web.client()
    sign_up(client, "fay", "fay@example.org")
    confirm(web.client(), link(web, CONFIRM_LINK, "fay@example.org"))
    other = web.client()
    for browser in (client, other):
        browser.post("/signin/mail", data={"email": "fay@example.org", "csrf": csrf_of(browser)})
        assert follow_signin(browser, link(web, SIGNIN_LINK, "fay@example.org")).status_code == 303
        web.smtp.mailbox.mails.clear()
        with web.queue.database.transaction() as db:  # the next link without waiting out the minute between two
            db.execute("UPDATE outbox SET created = created - 120")
    made = client.post("/settings/token", data={"csrf": csrf_of(client, "/settings")})
    token = re.search(r'id="new-token">[^<]*<code>([^<]+)</code>', made.text).group(1)
    assert made.headers["cache-control"] == "no-store" and token not in made.text.split("</title>")[0]
    assert client.get("/api/entries", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    assert client.get("/entries").status_code == 200  # this session goes on
    assert other.get("/entries").status_code == 401  # the others stopped
    again = client.post("/settings/token", data={"csrf": csrf_of(client, "/settings")})
    assert again.status_code == 200
    assert client.get("/api/entries", headers={"Authorization": f"Bearer {token}"}).status_code == 401


def test_one_mailbox_however_written_and_what_a_link_says(portal):
    web = portal
    client = web.client()
    for n, address in enumerate(("Gil@example.org", "gil@EXAMPLE.org", "GIL@example.ORG")):
        assert sign_up(client, f"gil{n}", address).status_code == 200
    drain(web.notifier)
    assert len(web.smtp.mailbox.mails) == 1  # one mailbox: one confirmation in ten minutes
    assert web.owners.get("gil0").email == "gil@example.org"
    # Two sign-ups of one address, both mailed (a day apart): the second to be confirmed is refused.
    accounts = Accounts(web.queue.database)
    accounts.sign_up("gil-b", "gil@example.org", ("s", "t"), None, per_hour=60, at=time.time() - 3600)
    done = confirm(web.client(), link(web, CONFIRM_LINK, "gil@example.org"))
    assert "The organisers approve" in done.text
    web.vmjudge("owner", "approve", "gil0")
    token = confirm_link.token(session_key(web.home).encode(), "gil-b", "gil@example.org")
    refused = web.client().post("/settings/confirm", data={"token": token})
    assert refused.status_code == 400 and "belongs to an account already" in refused.text
    # A sign-in link says whose account it signs in to.
    client.post("/signin/mail", data={"email": "GIL@example.org", "csrf": csrf_of(client)})
    page = client.get(link(web, SIGNIN_LINK, "gil@example.org"))
    assert "This link signs in as <strong>gil0</strong>" in page.text


@pytest.mark.parametrize("portal", ["closed"], indirect=True)
def test_a_sign_up_confirmed_after_registration_closed_waits_for_the_organisers(portal):
    web = portal
    Accounts(web.queue.database).sign_up("hal", "hal@example.org", ("s", "t"), None, per_hour=60)
    token = confirm_link.token(session_key(web.home).encode(), "hal", "hal@example.org")
    web.client().post("/settings/confirm", data={"token": token})
    assert web.owners.get("hal").awaiting == "approval"
