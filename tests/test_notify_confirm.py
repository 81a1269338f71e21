"""Issue 54: a participant's address is used only once its owner has followed a signed, expiring
link mailed to it; dotless domains are refused; the organisers' webhook URLs never shown whole.

Against real parts: the portal is a real `vmjudge web` process, the sender the daemon's own
(supervisor/notifier.py) and the SMTP server a real one on loopback (notify_servers.py). The
tokens a test forges are made with itsdangerous, as notify/confirm.py documents them, with the
home's real key or another.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from itsdangerous import TimestampSigner, URLSafeTimedSerializer

from vmjudge.config import load_site
from vmjudge.errors import ConfigError
from vmjudge.notify import confirm, webhook
from vmjudge.notify.message import DeliveryError, Message
from vmjudge.queue.db import Queue
from vmjudge.queue.outbox import DAY, DROPPED, FAILED, SENT, listing, organiser_event, prune, settle
from vmjudge.queue.owners import OwnerError, Owners
from vmjudge.supervisor.notifier import Notifier
from vmjudge.web import confirm_link

from .cli import run_cli
from .notify_servers import Receiver, SmtpServer
from .test_notify_channels import SECRET, private
from .test_notify_outbox import judge, new_entry
from .test_web_abuse import with_site
from .web_home import CSRF, WebHome
from .web_process import running_portal, signed_in_client

PORTAL_URL = "https://judge.example.org"
LINK = re.compile(re.escape(PORTAL_URL) + r"(/settings/confirm\?token=[A-Za-z0-9_.=-]+)")


def notify_toml(smtp_port: int, portal_url: str | None = PORTAL_URL) -> str:
    return ("[notify]\n" + (f'portal_url = "{portal_url}"\n' if portal_url else "")
            + f'[notify.smtp]\nhost = "127.0.0.1"\nport = {smtp_port}\nsecurity = "none"\nfrom = "judge@localhost"\n')


def drain(notifier: Notifier, at: float | None = None) -> None:
    """Let the real sender take every message due (at `at`), as the daemon's thread would."""
    while notifier.once(at):
        pass


def csrf(client: httpx.Client, path: str = "/settings") -> str:
    found = CSRF.search(client.get(path).text)
    assert found, f"no CSRF token on {path}"
    return found.group(1)


def set_address(client: httpx.Client, address: str) -> httpx.Response:
    return client.post("/settings", data={"email": address, "csrf": csrf(client)})


def mail_text(mail) -> str:
    return mail.get_payload(decode=True).decode().replace("\r\n", "\n")


def link_of(mail) -> str:
    found = LINK.search(mail_text(mail))
    assert found, f"no confirmation link in {mail_text(mail)!r}"
    return found.group(1)


def token_of(path: str) -> str:
    return path.split("token=", 1)[1]


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def payload(owner: str) -> str:
    """A token's first part: the owner it names, as itsdangerous writes it (compact JSON, base64)."""
    return b64(json.dumps(owner, separators=(",", ":")).encode())


def confirmation_mail(owner: str, address: str) -> tuple[str, str]:
    """The mail the portal writes for `owner`'s `address` (web/settings.py), with a key of the test's."""
    until = int(time.time()) + confirm.VALID_SECONDS
    return confirm.mail(PORTAL_URL, address, confirm_link.token(b"k" * 64, owner, address), until)


def forged(key: str, owner: str, address: str, signed: int) -> str:
    """A token made as notify/confirm.py documents it, signed at `signed`: what only the home's
    key can make."""
    class At(TimestampSigner):
        def get_timestamp(self) -> int:
            return signed

    return URLSafeTimedSerializer(key.encode(), salt=f"vmjudge email confirmation\0{address}", signer=At).dumps(owner)


def follow(base: str, path: str) -> httpx.Response:
    """Follow a link from the mail as its reader does: a browser not signed in opens it, and
    presses the page's button."""
    with httpx.Client(base_url=base, timeout=30) as browser:
        page = browser.get(path)
        if page.status_code != 200:
            return page
        assert 'id="confirm"' in page.text and "Set-Cookie" not in page.headers  # opening it changes nothing
        return browser.post("/settings/confirm", data={"token": token_of(path)})


@pytest.fixture
def judge_home(tmp_path):
    """A home with an SMTP server, [notify] portal_url, the daemon's sender, and ana (no address)."""
    with SmtpServer() as server:
        web = with_site(WebHome(tmp_path), notify_toml(server.port))
        web.token = web.owners.add("ana")
        web.smtp = server
        web.notifier = Notifier(web.site, web.queue)
        yield web


def test_an_unconfirmed_address_gets_nothing_until_its_link_is_followed(judge_home, tmp_path):
    web, server = judge_home, judge_home.smtp
    with running_portal(web.home, tmp_path / "portal.log") as portal:
        ana = signed_in_client(portal.base, web.token)
        saved = set_address(ana, "ana@example.org")
        assert saved.status_code == 303, saved.text
        # An entry of ana's ends while the address is unconfirmed: the sender mails it nothing.
        first = new_entry(web.queue, tmp_path)
        judge(web.queue, first)
        drain(web.notifier, at=web.queue.entry(first).published + 1)
        [(_, to, confirmation)] = server.mailbox.mails
        assert to == ["ana@example.org"] and confirmation["Subject"] == "Confirm your address for the judge's emails"
        text = mail_text(confirmation)
        assert "ana@example.org" in text and not re.search(r"\bana\b", text.replace("ana@example.org", ""))  # no name
        assert not [r for r in listing(web.queue.database) if r.entry_id == first and r.state != DROPPED]
        assert web.owners.get("ana").email == "ana@example.org" and web.owners.get("ana").confirmed_email is None
        page = ana.get("/settings").text
        assert "unconfirmed: we sent a link to ana@example.org" in page and 'id="resend"' in page
        # The reader of the mail follows the link, signed in or not: the address is confirmed.
        confirmed = follow(portal.base, link_of(confirmation))
        assert confirmed.status_code == 200 and "ana@example.org is confirmed" in confirmed.text
        assert web.owners.get("ana").confirmed_email == "ana@example.org"
        token = link_of(confirmation).split("token=", 1)[1]
        assert "/settings/confirm?" in portal.logged() and token not in portal.logged()  # no token in the access log
        assert "unconfirmed" not in ana.get("/settings").text
        second = new_entry(web.queue, tmp_path)
        judge(web.queue, second)
        drain(web.notifier, at=web.queue.entry(second).published + 1)
        [entry_mail] = server.mailbox.to("ana@example.org")[1:]
        assert entry_mail["Subject"] == f"Entry {second} for quiz1: Entry scored."
        assert len(server.mailbox.mails) == 2  # the first entry's message was never written nor sent


def test_forged_expired_and_other_owners_tokens_are_refused(judge_home, tmp_path):
    web, server = judge_home, judge_home.smtp
    bo_token = web.owners.add("bo")
    with running_portal(web.home, tmp_path / "portal.log") as portal:
        key = (web.home / "web-session.key").read_text().strip()
        ana, bo = signed_in_client(portal.base, web.token), signed_in_client(portal.base, bo_token)
        assert set_address(ana, "shared@example.org").status_code == 303
        assert set_address(bo, "shared@example.org").status_code == 303
        drain(web.notifier)
        links = {m["Message-ID"]: link_of(m) for m in server.mailbox.to("shared@example.org")}
        assert len(links) == 2
        bo_link = next(p for p in links.values() if token_of(p).startswith(payload("bo") + "."))
        _, signed, mac = token_of(bo_link).split(".")
        now = int(time.time())
        later = b64((int.from_bytes(base64.urlsafe_b64decode(signed + "=" * (-len(signed) % 4)), "big") + 3600)
                    .to_bytes(4, "big"))
        tokens = {
            "bo's token given ana's name": f"{payload('ana')}.{signed}.{mac}",
            "a changed signing time": f"{payload('bo')}.{later}.{mac}",
            "another key's": forged("0" * 64, "ana", "shared@example.org", now),
            "an expired one": forged(key, "ana", "shared@example.org", now - 24 * 3600 - 1),
            "for another address": forged(key, "ana", "ana@example.org", now),
            "not a token": "ana",
        }
        for what, token in tokens.items():
            refused = follow(portal.base, f"/settings/confirm?token={token}")
            assert refused.status_code == 400, what
            sentence = "This link has expired" if what == "an expired one" else "This link is not valid"
            assert sentence in refused.text, (what, refused.text)
            posted = httpx.post(f"{portal.base}/settings/confirm", data={"token": token}, timeout=30)
            assert posted.status_code == 400 and sentence in posted.text, what
        assert web.owners.get("ana").confirmed_email is None and web.owners.get("bo").confirmed_email is None
        assert follow(portal.base, bo_link).status_code == 200  # bo's own link, untouched, still works
        assert (web.owners.get("ana").confirmed_email, web.owners.get("bo").confirmed_email) == \
            (None, "shared@example.org")


def test_changing_the_address_unconfirms_it_and_drops_what_was_waiting(judge_home, tmp_path):
    web, server = judge_home, judge_home.smtp
    # The organiser types ana's address: trusted, as confirmed.
    typed = web.vmjudge("owner", "set", "ana", "--email", "ana@example.org")
    assert typed.returncode == 0, typed.stderr
    entry_id = new_entry(web.queue, tmp_path)
    judge(web.queue, entry_id)  # its message is written, to be sent at the publish time
    with running_portal(web.home, tmp_path / "portal.log") as portal:
        ana = signed_in_client(portal.base, web.token)
        assert set_address(ana, "ana@lab.example.org").status_code == 303
        drain(web.notifier, at=web.queue.entry(entry_id).published + 1)
        # The entry's message goes to neither address; only the confirmation, to the new one.
        [(_, to, mail)] = server.mailbox.mails
        assert to == ["ana@lab.example.org"] and link_of(mail)
        assert web.owners.get("ana").email == "ana@lab.example.org" and web.owners.get("ana").confirmed_email is None
        assert "email ana@lab.example.org (unconfirmed)" in web.vmjudge("owner", "list").stdout
        listed = json.loads(web.vmjudge("owner", "list", "--json").stdout)
        assert [(o["email"], o["email_confirmed"]) for o in listed] == [("ana@lab.example.org", False)]
        [dropped] = [r for r in listing(web.queue.database) if r.entry_id == entry_id]
        assert dropped.state == DROPPED and "not confirmed" in dropped.last_error
        # Straight back to the address the organiser typed: a second mail so soon is refused, nothing changes.
        again = ana.post("/settings", data={"email": "ana@example.org", "csrf": csrf(ana)})
        assert again.status_code == 429 and "less than 10 minutes ago" in again.text  # the rate limit
        assert web.owners.get("ana").email == "ana@lab.example.org"
    # The organiser typing an address makes it trusted at once.
    assert web.vmjudge("owner", "set", "ana", "--email", "ana@example.org").returncode == 0
    assert web.owners.get("ana").confirmed_email == "ana@example.org"
    assert json.loads(web.vmjudge("owner", "list", "--json").stdout)[0]["email_confirmed"] is True


def test_confirmation_mails_are_rate_limited_per_owner(judge_home, tmp_path):
    web, server = judge_home, judge_home.smtp
    with running_portal(web.home, tmp_path / "portal.log") as portal:
        ana = signed_in_client(portal.base, web.token)
        assert set_address(ana, "victim@example.org").status_code == 303
        for _ in range(3):
            resent = ana.post("/settings/resend", data={"csrf": csrf(ana)})
            assert resent.status_code == 429 and "less than 10 minutes ago" in resent.text
            other = set_address(ana, "victim2@example.org")
            assert other.status_code == 429 and "less than 10 minutes ago" in other.text
        drain(web.notifier)
        assert [to for _, to, _ in server.mailbox.mails] == [["victim@example.org"]]
    # And a few a day, however far apart: at most 5 in any 24 hours.
    owners = Owners(web.queue.database)
    start = time.time() + 700
    for n in range(4):
        owners.ask_email("ana", f"v{n}@example.org", confirmation_mail("ana", f"v{n}@example.org"), at=start + n * 601)
    with pytest.raises(OwnerError, match="5 confirmation mails were sent in the last day"):
        owners.ask_email("ana", "v9@example.org", confirmation_mail("ana", "v9@example.org"), at=start + 4 * 601)
    owners.ask_email("ana", "v9@example.org", confirmation_mail("ana", "v9@example.org"), at=start + 86400)


def test_gc_keeps_a_days_confirmations_whatever_outbox_days_says(queue_location):
    """The daily limit counts the outbox's confirmations: `gc` removing them sooner would lift it."""
    queue = Queue(queue_location, host="a")
    owners = Owners(queue.database)
    owners.add("ana")
    at = time.time()
    owners.ask_email("ana", "ana@example.org", confirmation_mail("ana", "ana@example.org"), at=at)
    with queue.database.transaction() as db:
        db.execute("UPDATE outbox SET claimed_by = 'a'")
    [row] = listing(queue.database)
    assert settle(queue.database, row, "a", SENT)
    assert prune(queue.database, ended_before=at + 2 * 3600, at=at + 2 * 3600) == 0  # outbox_days = 0, 2 h on
    assert prune(queue.database, ended_before=at + DAY + 1, at=at + DAY + 1) == 1


def test_dotless_domains_are_refused(judge_home, tmp_path):
    web = judge_home
    sentence = "its domain must have a dot and end in a name"
    for address in ("root@mailhub", "a@localhost", "a@10.0.0.1", "a@example.123"):
        refused = web.vmjudge("owner", "set", "ana", "--email", address)
        assert refused.returncode == 1 and sentence in refused.stderr, (address, refused.stderr)
        assert refused.stderr.count("\n") == 1
        with pytest.raises(OwnerError, match=sentence):
            web.owners.add("cy", email=address)
    with running_portal(web.home, tmp_path / "portal.log") as portal:
        ana = signed_in_client(portal.base, web.token)
        refused = set_address(ana, "root@mailhub")
        assert refused.status_code == 400 and sentence in refused.text
    assert web.owners.get("ana").email is None and web.smtp.mailbox.mails == []


def test_without_portal_url_no_address_is_set_and_the_organiser_is_told_what_to_set(tmp_path):
    with SmtpServer() as server:
        web = with_site(WebHome(tmp_path), notify_toml(server.port, portal_url=None))
        token = web.owners.add("ana")
        with running_portal(web.home, tmp_path / "portal.log") as portal:
            ana = signed_in_client(portal.base, token)
            refused = set_address(ana, "ana@example.org")
            assert refused.status_code == 400
            assert "cannot confirm addresses yet, so none can be set here: ask the organisers" in refused.text
            assert web.owners.get("ana").email is None and listing(web.queue.database) == []
            assert "[notify] portal_url" in portal.logged() and "https://judge.example.org" in portal.logged()


def test_a_queue_made_before_confirmations_holds_its_addresses_unconfirmed(queue_location, tmp_path):
    queue = Queue(queue_location, host="a")
    Owners(queue.database).add("ana", email="ana@example.org")
    with queue.database.transaction() as db:  # as an older vmjudge left it
        db.execute("ALTER TABLE owners DROP COLUMN email_confirmed_at")
        db.execute("ALTER TABLE outbox DROP COLUMN address")
    queue = Queue(queue_location, host="a")
    ana = Owners(queue.database).get("ana")
    assert (ana.email, ana.confirmed_email) == ("ana@example.org", None)
    entry_id = new_entry(queue, tmp_path)
    judge(queue, entry_id)
    assert listing(queue.database) == []  # nothing is written for an unconfirmed address


SECRET_PATH = "/services/T0001/B0002/s3cr3tPathT0ken"


def test_webhook_urls_are_shown_as_scheme_and_host_only(tmp_path, caplog):
    with Receiver(SECRET, statuses=(404,)) as receiver:
        port = receiver.server.server_address[1]
        url = f"http://127.0.0.1:{port}{SECRET_PATH}?token=q5ecretQuery"
        home = tmp_path / "home"
        home.mkdir()
        secret = private(tmp_path / "webhook.secret", SECRET.decode())
        (home / "site.toml").write_text(f'[notify]\nwebhooks = ["{url}"]\nwebhook_secret_file = "{secret}"\n')
        site = load_site(home)
        site.layout.ensure()
        queue = Queue(site.layout.queue_db, host="a")
        with queue.database.transaction() as db:
            organiser_event(db, "host h2", "host h2", "Host h2 is down.")
        with caplog.at_level(logging.INFO, logger="vmjudge"):
            assert Notifier(site, queue).once()
        [received] = receiver.received
        assert received.path == f"{SECRET_PATH}?token=q5ecretQuery"  # it did go to the whole URL
        [row] = listing(queue.database)
        assert row.state == FAILED
        shown = f"http://127.0.0.1:{port}/…"
        tested = run_cli("notify", "test", url, home=home)
        outputs = {"log": caplog.text, "notify list": run_cli("notify", "list", home=home).stdout,
                   "notify list --json": run_cli("notify", "list", "--json", home=home).stdout,
                   "notify test": tested.stdout + tested.stderr}
    for what, text in outputs.items():
        assert "s3cr3t" not in text and "q5ecret" not in text and "T0001" not in text, (what, text)
    assert f"{shown}: 127.0.0.1:{port} answered 404" in outputs["log"]
    assert f"{shown}: 127.0.0.1:{port} answered 404" in outputs["notify list"]
    assert f"not sent to {shown}:" in outputs["notify test"]



@pytest.mark.parametrize("webhooks", ['["http://hooks.example.org/services/s3cr3t?token=q5ecret"]',
                                      '["https://user:s3cr3t@hooks.example.org/x?token=q5ecret"]',
                                      '"https://hooks.example.org/services/s3cr3t?token=q5ecret"'])
def test_a_refused_webhook_url_is_not_quoted_in_the_refusal(tmp_path, webhooks):
    (tmp_path / "site.toml").write_text(f'[notify]\nwebhooks = {webhooks}\nwebhook_secret_file = "/s"\n')
    with pytest.raises(ConfigError, match=r"\[notify\] webhooks") as refused:
        load_site(tmp_path)
    assert "s3cr3t" not in str(refused.value) and "q5ecret" not in str(refused.value)


class EchoingNotFound(BaseHTTPRequestHandler):
    """A receiver's 404 page that quotes the path it was asked for, as Apache's does."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(404)
        self.end_headers()
        self.wfile.write(f"The requested URL {self.path} was not found on this server.".encode())

    def log_message(self, *args) -> None:
        pass


def test_a_receivers_answer_quoting_the_secret_path_is_cut():
    server = ThreadingHTTPServer(("127.0.0.1", 0), EchoingNotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}{SECRET_PATH}?token=q5ecretQuery"
        with pytest.raises(DeliveryError) as refused:
            webhook.post(url, SECRET, Message(kind="test", subject="s", text="t\n", delivery="d"), timeout=5)
    finally:
        server.shutdown()
        server.server_close()
    said = str(refused.value)
    assert refused.value.permanent and "answered 404 The requested URL /… was not found" in said, said
    assert "s3cr3t" not in said and "q5ecret" not in said
