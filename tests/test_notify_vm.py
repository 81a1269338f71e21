"""#35's acceptance in real VMs: one example entry (af2017's good one) goes through `vmjudge
submit` and `vmjudge daemon --until-idle`, with site.toml [notify] sending to a real SMTP server
(aiosmtpd) and a real webhook receiver on loopback (tests/notify_servers.py).

- The participant's email for the scored entry carries the verdict and the score, and is exactly
  the participant's line of "my entries" (reports/notice.py): nothing of the exam's exact seconds,
  its memory figures (participants see tenths of the caps), the test records' names or the
  archive's hash. It arrives no earlier than the entry's publish time.
- The organisers' webhook (the home's disk below [notify] disk_free_percent, set at 99.99 % so
  that the real daemon's heartbeat finds this condition on any disk) is signed: its signature
  verifies by the documented check, a changed body does not, and the same request sent again is
  refused as a replay.

`daemon --until-idle` ends when nothing is queued or running; a message not yet due then (the
entry's, before its publish time) is sent by the next daemon, started here with no entry to
judge on libvirt's test driver, as in tests/test_notify_daemon.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from vmjudge.config import load_challenge, load_site
from vmjudge.notify.signature import DELIVERY, HEADER, TOLERANCE, Replays, verify
from vmjudge.queue.db import Queue
from vmjudge.queue.outbox import SENT, listing
from vmjudge.vm import domain

from .notify_servers import Receiver, SmtpServer
from .published import wait_until_published
from .test_notify_channels import SECRET, private
from .test_notify_daemon import Daemon
from .test_pipeline import archive, vmjudge
from .waiting import wait_for

REPO = Path(__file__).resolve().parent.parent
AF2017 = REPO / "examples" / "af2017"
PORTAL = "https://judge.example.org"


def site_toml(smtp_port: int, webhook: str, secret: Path) -> str:
    return (f'[queue]\nhost = "a"\n\n'
            f'[notify]\norganisers = ["ops@example.org"]\nwebhooks = ["{webhook}"]\n'
            f'webhook_secret_file = "{secret}"\nportal_url = "{PORTAL}"\ntimeout_seconds = 20\n'
            'disk_free_percent = 99.99\n\n'
            f'[notify.smtp]\nhost = "127.0.0.1"\nport = {smtp_port}\nsecurity = "none"\nfrom = "judge@localhost"\n')


@pytest.fixture(scope="module")
def notified(site, image, conn):
    home = Path(tempfile.mkdtemp(prefix="notify-vm-", dir=site.home))
    os.chmod(home, 0o711)
    (home / "images").symlink_to(site.layout.images)  # share the test image cache
    with SmtpServer() as smtp, Receiver(SECRET) as receiver:
        secret = private(home / "webhook.secret", SECRET.decode())
        (home / "site.toml").write_text(site_toml(smtp.port, receiver.url, secret))
        vmjudge(home, "challenge", "add", str(AF2017))
        vmjudge(home, "owner", "add", "ana", "--email", "ana@example.org")
        path = archive(AF2017 / "entries" / "good", home / "af2017-good-entry.tar.gz")
        entry_id = int(vmjudge(home, "submit", "af2017", str(path), "--owner", "ana").stdout)
        daemon = vmjudge(home, "daemon", "--until-idle")
        wait_until_published(home)
        queue = Queue(load_site(home).layout.queue_db, host="a")
        if not smtp.mailbox.to("ana@example.org"):  # not yet due when the daemon ended: the next one sends it
            with Daemon(home, queue) as sender:
                wait_for(lambda: smtp.mailbox.to("ana@example.org"), 60, "the participant's email")
                assert sender.stop() == 0, sender.said()
        yield {"home": home, "entry_id": entry_id, "queue": queue, "smtp": smtp, "receiver": receiver,
               "archive": path, "daemon_said": daemon.stderr}
    assert domain.leftover_domains(conn) == []
    shutil.rmtree(home)


def numbers_under(doc: Any, keys: tuple[str, ...]) -> list[float]:
    """Every number in `doc` under a key naming one of `keys` (seconds, memory)."""
    found: list[float] = []
    if isinstance(doc, dict):
        for key, value in doc.items():
            if any(k in key for k in keys) and isinstance(value, (int, float)) and not isinstance(value, bool):
                found.append(float(value))
            else:
                found += numbers_under(value, keys)
    elif isinstance(doc, list):
        for value in doc:
            found += numbers_under(value, keys)
    return found


def renderings(x: float) -> set[str]:
    """How a figure could be written: exactly, and to 1, 2 or 3 decimals (and in MiB for memory)."""
    said = {repr(x), f"{x:.1f}", f"{x:.2f}", f"{x:.3f}"}
    if x >= 1 << 20:
        mib = x / (1 << 20)
        said |= {str(int(x)), f"{mib:.1f}", f"{mib:.2f}"}
    return said


def test_the_participants_email_says_the_verdict_and_score_and_nothing_finer_after_the_publish_time(notified):
    home, entry_id, queue = notified["home"], notified["entry_id"], notified["queue"]
    doc = json.loads(vmjudge(home, "show", str(entry_id), "--json").stdout)
    assert (doc["state"], doc["outcome"], doc["scores"]["score"]) == ("done", "scored", 1.0), \
        doc["report"] + notified["daemon_said"]
    mails = [(at, m) for at, rcpt, m in notified["smtp"].mailbox.mails if rcpt == ["ana@example.org"]]
    assert len(mails) == 1, mails
    [(at, mail)] = mails
    entry = queue.entry(entry_id)
    [row] = [r for r in listing(queue.database) if r.audience == "owner"]
    assert (row.entry_id, row.state) == (entry_id, SENT)
    # Never before participants may see the result: the publish time, or the entry's end if later.
    assert entry.published is not None and row.not_before >= entry.published and at >= row.not_before
    assert mail["Subject"] == f"Entry {entry_id} for af2017: Entry scored."
    assert mail["Message-ID"] == f"<vmjudge-outbox-{row.id}@vmjudge>"
    text = mail.get_payload(decode=True).decode().replace("\r\n", "\n")
    assert text == (f"Entry {entry_id} (af2017-good-entry.tar.gz) for af2017:\n\nEntry scored.\nScore: 1.0000\n\n"
                    f"Report: {PORTAL}/entries/{entry_id}\n\nYou get this message because your address was given "
                    "to the judge; ask the organisers to stop it.\n")
    # What the organiser's view holds and the participant's does not: none of it is in the message.
    organiser = json.loads(vmjudge(home, "show", str(entry_id), "--organiser", "--json").stdout)["organiser"]
    exam_runs = [a for a in organiser["attempts"] if a["stage"] == "exam" and a["figures"]]
    assert exam_runs, organiser["attempts"]
    seconds = numbers_under(exam_runs[-1]["figures"], ("seconds",))
    memory = numbers_under(exam_runs[-1]["figures"], ("memory",))
    assert seconds and memory, exam_runs[-1]["figures"]  # the figures are really there to leak
    forbidden = {s for x in seconds + memory if x not in (0.0, 1.0) for s in renderings(x)}
    forbidden |= set(load_challenge(AF2017).test)  # the test records' names
    forbidden.add(hashlib.sha256(notified["archive"].read_bytes()).hexdigest())
    words = set(re.findall(r"[\w.]+", text + " " + mail["Subject"]))
    assert not (words & forbidden), words & forbidden


def test_the_organisers_webhook_is_signed_and_a_replay_is_refused(notified):
    receiver = notified["receiver"]
    hooks = [r for r in receiver.accepted() if r.json["kind"] == "disk-low"]
    assert len(hooks) == 1, [r.json for r in receiver.received]
    [hook] = hooks
    assert hook.json["subject"].startswith("vmjudge: The home's disk (") and "99.99 %" in hook.json["text"]
    assert [r.refused for r in receiver.received] == [None] * len(receiver.received)
    # The documented check, anew, at the time it arrived: the signature verifies; a body changed in
    # transit does not; the same request a second later is a replay.
    header, replays = hook.headers[HEADER], Replays()
    assert verify(SECRET, hook.body.replace(b"disk", b"DISK"), header, hook.at, replays) == "bad signature"
    assert verify(SECRET, hook.body, header, hook.at, replays) is None
    assert verify(SECRET, hook.body, header, hook.at + 1, replays) == "a replay"
    # The same request sent to the receiver again now, as someone who captured it would: refused as a
    # replay while within the signature's window, as too old after it (the VM run may take longer).
    again = urllib.request.Request(receiver.url, data=hook.body, method="POST",
                                   headers={"Content-Type": "application/json", HEADER: header,
                                            DELIVERY: hook.headers[DELIVERY]})
    sent_at = time.time()
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(again, timeout=10)
    assert refused.value.code == 400
    why = receiver.received[-1].refused
    assert why == ("a replay" if sent_at - hook.at < TOLERANCE - 5 else "too old (or from the future)"), why
