"""#35's opt-in in the portal: an owner sets or clears the address it hears of its entries at on
/settings (CSRF-checked, a bad address refused in one sentence), and sees only its own; the
address is used once confirmed (#54, test_notify_confirm.py)."""

from __future__ import annotations

from vmjudge.queue.outbox import listing

from .test_notify_outbox import judge, new_entry
from .test_web_abuse import with_site
from .web_home import WebHome, csrf_of, sign_in


def test_an_owner_opts_in_and_out_on_the_settings_page(tmp_path):
    web = with_site(WebHome(tmp_path), '[notify]\nportal_url = "https://judge.example.org"\n[notify.smtp]\n'
                                       'host = "127.0.0.1"\nsecurity = "none"\n')
    token = web.owners.add("ana")
    web.owners.add("bo", email="bo@example.org")
    client = web.client()
    assert client.get("/settings").status_code == 401
    assert sign_in(client, token).status_code == 303
    page = client.get("/settings")
    assert page.status_code == 200 and 'value=""' in page.text and "bo@example.org" not in page.text
    assert client.post("/settings", data={"email": "ana@example.org"}).status_code == 403  # no CSRF token
    assert web.owners.get("ana").email is None
    saved = client.post("/settings", data={"email": " ana@example.org ", "csrf": csrf_of(client, "/settings")})
    assert saved.status_code == 303 and saved.headers["location"] == "/settings"
    assert web.owners.get("ana").email == "ana@example.org"
    assert 'value="ana@example.org"' in client.get("/settings").text
    [asked] = listing(web.queue.database)  # its confirmation, and nothing else until it is followed
    assert (asked.kind, asked.owner, asked.address) == ("email-confirm", "ana", "ana@example.org")
    bad = client.post("/settings", data={"email": "ana@example.org, bo@example.org",
                                         "csrf": csrf_of(client, "/settings")})
    assert bad.status_code == 400 and "is not allowed: give one plain address" in bad.text
    assert web.owners.get("ana").email == "ana@example.org"
    # Opted in and confirmed: an entry of ana's now writes its message.
    assert web.owners.confirm("ana", "ana@example.org")
    entry_id = new_entry(web.queue, tmp_path, owner="ana")
    judge(web.queue, entry_id)
    assert [(r.owner, r.entry_id) for r in listing(web.queue.database)] == [("ana", entry_id), ("ana", None)]
    cleared = client.post("/settings", data={"email": "", "csrf": csrf_of(client, "/settings")})
    assert cleared.status_code == 303 and web.owners.get("ana").email is None
    assert web.owners.get("bo").email == "bo@example.org"
