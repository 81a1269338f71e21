"""#35's commands: `vmjudge notify test ADDRESS|URL` against real loopback servers, `notify list`,
and `owner add|set --email`."""

from __future__ import annotations

import json
from pathlib import Path

from vmjudge.config import load_site
from vmjudge.queue.db import Queue
from vmjudge.queue.outbox import organiser_event
from vmjudge.supervisor.notifier import Notifier

from .cli import run_cli
from .notify_servers import Receiver, SmtpServer, free_port
from .test_notify_channels import SECRET, private


def notify_home(tmp_path: Path, smtp_port: int, extra: str = "") -> Path:
    home = tmp_path / "home"
    home.mkdir()
    secret = private(tmp_path / "webhook.secret", SECRET.decode() + "\n")
    (home / "site.toml").write_text(f'[notify]\nwebhook_secret_file = "{secret}"\n{extra}'
                                    f'[notify.smtp]\nhost = "127.0.0.1"\nport = {smtp_port}\nsecurity = "none"\n'
                                    'from = "judge@localhost"\n')
    return home


def test_notify_test_sends_one_message_and_says_what_happened(tmp_path):
    with SmtpServer() as server, Receiver(SECRET) as receiver:
        home = notify_home(tmp_path, server.port)
        sent = run_cli("notify", "test", "ana@example.org", home=home)
        assert sent.returncode == 0, sent.stderr
        assert sent.stdout == f"sent to ana@example.org: accepted by 127.0.0.1:{server.port}\n"
        [mail] = server.mailbox.to("ana@example.org")
        assert mail["Subject"] == "vmjudge: a test message"
        hooked = run_cli("notify", "test", receiver.url, home=home)
        assert hooked.returncode == 0, hooked.stderr
        port = receiver.server.server_address[1]  # the URL shown as scheme://host/… only (issue 54)
        assert hooked.stdout == f"sent to http://127.0.0.1:{port}/…: 127.0.0.1:{port} answered 200\n"
        [got] = receiver.accepted()
        assert got.json["kind"] == "test" and got.json["test"] is True
    down = run_cli("notify", "test", "ana@example.org", home=home)
    assert down.returncode == 1
    assert down.stderr.startswith("vmjudge: not sent to ana@example.org: 127.0.0.1:") and \
        "ConnectionRefusedError" in down.stderr and "(the judge's sender would try again later)" in down.stderr
    bad = run_cli("notify", "test", "not an address", home=home)
    assert bad.returncode == 1 and bad.stderr == ("vmjudge: 'not an address' is neither an email address nor an "
                                                  "http(s):// URL: give one of them.\n")


def test_notify_test_refuses_a_secret_others_may_read(tmp_path):
    home = notify_home(tmp_path, free_port())
    (tmp_path / "webhook.secret").chmod(0o644)
    refused = run_cli("notify", "test", "ana@example.org", home=home)
    assert refused.returncode == 1
    assert "The webhook secret file" in refused.stderr and "is not allowed: it must be a file of this user's" \
        in refused.stderr and refused.stderr.count("\n") == 1


def test_the_outbox_listing_when_empty(tmp_path):
    home = notify_home(tmp_path, free_port())
    listed = run_cli("notify", "list", home=home)
    assert listed.returncode == 0 and listed.stdout == "the outbox is empty\n"
    assert json.loads(run_cli("notify", "list", "--json", home=home).stdout) == []



def test_owners_opt_in_to_email_and_out_again(tmp_path):
    home = notify_home(tmp_path, free_port())
    added = run_cli("owner", "add", "ana", "--email", "ana@example.org", home=home)
    assert added.returncode == 0, added.stderr
    listed = json.loads(run_cli("owner", "list", "--json", home=home).stdout)
    assert [(o["name"], o["email"]) for o in listed] == [("ana", "ana@example.org")]
    assert run_cli("owner", "set", "ana", "--no-email", home=home).stdout == "ana gets no email from now on.\n"
    assert json.loads(run_cli("owner", "list", "--json", home=home).stdout)[0]["email"] is None
    moved = run_cli("owner", "set", "ana", "--email", "ana@lab.example.org", home=home)
    assert moved.stdout == "ana hears of its entries at ana@lab.example.org.\n"
    assert "email ana@lab.example.org" in run_cli("owner", "list", home=home).stdout
    bad = run_cli("owner", "set", "ana", "--email", "Ana <ana@example.org>", home=home)
    assert bad.returncode == 1 and bad.stderr == ("vmjudge: The address 'Ana <ana@example.org>' is not allowed: give "
                                                  "one plain address such as \"ana@example.org\" (no name, no "
                                                  "spaces).\n")
    nobody = run_cli("owner", "set", "cy", "--email", "cy@example.org", home=home)
    assert nobody.returncode == 1 and "no owner named 'cy' holds a token" in nobody.stderr
    neither = run_cli("owner", "set", "ana", home=home)
    assert neither.returncode == 2 and "give either --email ADDR or --no-email." in neither.stderr


def test_notify_list_shows_what_failed_and_why(tmp_path):
    home = notify_home(tmp_path, free_port(), extra='organisers = ["ops@example.org"]\nmax_tries = 1\n')
    site = load_site(home)
    site.layout.ensure()
    queue = Queue(site.layout.queue_db, host="a")
    with queue.database.transaction() as db:
        organiser_event(db, "host h2", "host h2", "Host h2 is down.")
    assert Notifier(site, queue).once()
    listed = run_cli("notify", "list", home=home)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith("     1 failed   host h2       to organisers       host h2              tries 1: "
                                    "email:ops@example.org: 127.0.0.1:")
    [row] = json.loads(run_cli("notify", "list", "--json", "--state", "failed", home=home).stdout)
    assert (row["state"], row["tries"], row["subject"]) == ("failed", 1, "vmjudge: Host h2 is down.")
    assert json.loads(run_cli("notify", "list", "--json", "--state", "sent", home=home).stdout) == []
