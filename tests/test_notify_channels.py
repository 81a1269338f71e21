"""#35's channels against real servers on loopback: SMTP (aiosmtpd) plain, with STARTTLS and with
TLS from the first byte, with AUTH from a credentials file only the user may read; webhooks
signed and checked by the documented check (a replay refused), over https with the receiver's
certificate checked, and a hanging receiver bounded by the timeout."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from vmjudge.config.notify import SmtpSite
from vmjudge.errors import ConfigError
from vmjudge.notify import smtp, webhook
from vmjudge.notify.message import DeliveryError, Message
from vmjudge.notify.signature import HEADER, TOLERANCE, Replays, sign, verify

from .notify_servers import Receiver, SmtpServer, free_port, self_signed

SECRET = b"0123456789abcdef0123456789abcdef"
MESSAGE = Message(kind="test", subject="Entry 7 for af2017: Entry scored.", text="Score: 0.8100\n",
                  delivery="vmjudge-outbox-7", data={"entry": {"id": 7}})


def private(path: Path, text: str, mode: int = 0o600) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def test_plain_smtp_to_a_loopback_server_delivers_the_message_with_its_delivery_id():
    with SmtpServer() as server:
        said = smtp.send(SmtpSite(host="127.0.0.1", port=server.port, security="none", sender="judge@localhost"),
                         "ana@example.org", MESSAGE, timeout=5)
        assert "accepted by 127.0.0.1" in said
        [mail] = server.mailbox.to("ana@example.org")
    assert mail["Subject"] == MESSAGE.subject and mail["From"] == "judge@localhost"
    assert mail["Message-ID"] == "<vmjudge-outbox-7@vmjudge>"
    assert mail.get_payload(decode=True).decode().replace("\r\n", "\n") == "Score: 0.8100\n"


def test_starttls_with_a_login_read_from_a_private_file(tmp_path):
    cert = self_signed(tmp_path)
    creds = private(tmp_path / "smtp.credentials", "judge\ns3cret pass\n")
    with SmtpServer(security="starttls", cert=cert, login=("judge", "s3cret pass")) as server:
        site = SmtpSite(host="127.0.0.1", port=server.port, security="starttls", credentials_file=creds,
                        ca_file=cert.cert)
        smtp.send(site, "ana@example.org", MESSAGE, timeout=5)
        assert server.mailbox.logins == ["judge"] and len(server.mailbox.to("ana@example.org")) == 1
        # The server's certificate is checked: without the CA that signed it, nothing is sent.
        with pytest.raises(DeliveryError, match="CERTIFICATE_VERIFY_FAILED"):
            smtp.send(SmtpSite(host="127.0.0.1", port=server.port, security="starttls", credentials_file=creds),
                      "bo@example.org", MESSAGE, timeout=5)
        assert server.mailbox.to("bo@example.org") == []


def test_tls_from_the_first_byte(tmp_path):
    cert = self_signed(tmp_path)
    with SmtpServer(security="tls", cert=cert) as server:
        smtp.send(SmtpSite(host="127.0.0.1", port=server.port, security="tls", ca_file=cert.cert),
                  "ana@example.org", MESSAGE, timeout=5)
        assert len(server.mailbox.to("ana@example.org")) == 1


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660])
def test_a_credentials_file_others_may_read_is_refused_before_anything_is_sent(tmp_path, mode):
    creds = private(tmp_path / "smtp.credentials", "judge\ns3cret\n", mode)
    with SmtpServer() as server:
        with pytest.raises(ConfigError, match=r"smtp.credentials is not allowed: it must be a file of this user's "
                                              r"\(uid \d+\) that no one else may read or write; run `chown"):
            smtp.send(SmtpSite(host="127.0.0.1", port=server.port, security="none", credentials_file=creds),
                      "ana@example.org", MESSAGE, timeout=5)
        assert server.mailbox.mails == []


def test_an_smtp_server_that_is_down_is_a_delivery_error_to_try_again():
    with pytest.raises(DeliveryError, match="ConnectionRefusedError") as down:
        smtp.send(SmtpSite(host="127.0.0.1", port=free_port(), security="none"), "ana@example.org", MESSAGE, 5)
    assert not down.value.permanent


def test_a_webhook_is_signed_with_a_timestamp_and_a_replay_is_refused():
    with Receiver(SECRET) as receiver:
        said = webhook.post(receiver.url, SECRET, MESSAGE, timeout=5)
        assert said.endswith("answered 200")
        [got] = receiver.accepted()
        assert got.json == {"kind": "test", "delivery": "vmjudge-outbox-7", "subject": MESSAGE.subject,
                            "text": MESSAGE.text, "entry": {"id": 7}}
        assert got.headers["X-Vmjudge-Delivery"] == "vmjudge-outbox-7"
        t = int(got.headers[HEADER].split(",")[0].removeprefix("t="))
        assert abs(t - got.at) < 5
        # The same request sent again, byte for byte: the documented check refuses it.
        assert verify(SECRET, got.body, got.headers[HEADER], time.time(), receiver.replays) == "a replay"
    # A fresh receiver (no memory of it) still refuses it once it is older than the tolerance...
    assert verify(SECRET, got.body, got.headers[HEADER], t + TOLERANCE + 1, Replays()) == "too old (or from the future)"
    # ...and a body changed, or given a new time, no longer matches its signature.
    assert verify(SECRET, got.body.replace(b"0.81", b"0.99"), got.headers[HEADER], t, Replays()) == "bad signature"
    moved = got.headers[HEADER].replace(f"t={t}", f"t={t + 600}")
    assert verify(SECRET, got.body, moved, t + 600, Replays()) == "bad signature"
    assert verify(b"another secret of 32 characters!", got.body, got.headers[HEADER], t, Replays()) == "bad signature"
    assert verify(SECRET, got.body, sign(SECRET, got.body, t), t, Replays()) is None


def test_a_receiver_that_refuses_for_good_or_for_now():
    with Receiver(SECRET, statuses=(404, 503)) as receiver:
        with pytest.raises(DeliveryError, match="answered 404") as gone:
            webhook.post(receiver.url, SECRET, MESSAGE, timeout=5)
        with pytest.raises(DeliveryError, match="answered 503") as busy:
            webhook.post(receiver.url, SECRET, MESSAGE, timeout=5)
    assert gone.value.permanent and not busy.value.permanent


def test_a_hanging_webhook_costs_its_timeout_and_no_more():
    with Receiver(SECRET, hang=True) as receiver:
        began = time.monotonic()
        with pytest.raises(DeliveryError, match="timed out") as hung:
            webhook.post(receiver.url, SECRET, MESSAGE, timeout=0.5)
        took = time.monotonic() - began
        assert len(receiver.received) == 1
    assert not hung.value.permanent and 0.5 <= took < 3


def test_a_webhook_over_https_checks_the_receivers_certificate(tmp_path):
    cert = self_signed(tmp_path)
    with Receiver(SECRET) as receiver:
        receiver.server.socket = cert.server_context().wrap_socket(receiver.server.socket, server_side=True)
        url = receiver.url.replace("http://", "https://")
        webhook.post(url, SECRET, MESSAGE, timeout=5, ca_file=cert.cert)
        assert len(receiver.accepted()) == 1
        with pytest.raises(DeliveryError, match="CERTIFICATE_VERIFY_FAILED"):
            webhook.post(url, SECRET, MESSAGE, timeout=5)


@pytest.mark.parametrize("url", ["http://example.org/hook", "http://10.0.0.1/hook", "ftp://127.0.0.1/x"])
def test_a_signed_body_never_goes_in_the_clear_off_this_machine(url):
    with pytest.raises(DeliveryError, match="is not an https:// URL") as refused:
        webhook.post(url, SECRET, MESSAGE, timeout=1)
    assert refused.value.permanent



def test_a_line_break_in_a_subject_adds_no_header():
    """An owner or archive name is the participant's choice: a line break in it must not become
    a header of the judge's email (Bcc, say)."""
    sneaky = Message(kind="test", subject="Entry 7 by eve\r\nBcc: spy@example.org", text="x\n", delivery="d1")
    with SmtpServer() as server:
        smtp.send(SmtpSite(host="127.0.0.1", port=server.port, security="none"), "ana@example.org", sneaky, 5)
        [(_, to, mail)] = server.mailbox.mails
    assert to == ["ana@example.org"] and mail["Bcc"] is None
    assert mail["Subject"] == "Entry 7 by eve Bcc: spy@example.org"
