"""`vmjudge notify list | test`: the outbox as the organiser sees it, and one message sent now
to check a channel (issue 35).

`list` shows what is waiting, what went and what failed for good, with the last error, newest
first. `test ADDRESS|URL` sends one message through [notify]'s SMTP server or, for a URL, as a
signed webhook, while the command waits, and says what the server answered: nothing goes
through the outbox, so it works with no daemon running.

Neither prints a webhook's URL whole, only scheme://host/… (queue/redact.py): its path or query
often holds the secret that lets anyone post to the organisers' channel, and what a command
prints ends up in terminals' scrollback, logs and pasted reports.
"""

from __future__ import annotations

import json
import secrets
import time

import click

from ..config.notify import email_ok
from ..errors import VmjudgeError
from ..notify.message import DeliveryError, Message
from ..queue.outbox import STATES, OutboxRow, listing
from ..queue.redact import url_shown, urls_shown
from ..queue.rows import stamp
from ..supervisor.notifier import check_secrets, email_target, webhook_target
from .echo import echo
from .home import site_and_queue, site_of


@click.group("notify")
def notify() -> None:
    """Notifications: the outbox, and a test message."""


def _row_json(r: OutboxRow) -> dict[str, object]:
    return {"id": r.id, "kind": r.kind, "audience": r.audience, "owner": r.owner, "entry_id": r.entry_id,
            "condition": r.condition, "subject": r.subject, "events": r.events, "created": stamp(r.created),
            "not_before": stamp(r.not_before), "state": r.state, "tries": r.tries,
            "next_try": stamp(r.next_try) if r.state == "pending" else None,
            "delivered": [urls_shown(d) for d in r.delivered],
            "last_error": None if r.last_error is None else urls_shown(r.last_error)}


@notify.command("list")
@click.option("--state", "states", multiple=True, type=click.Choice(STATES), help="Only these (repeatable).")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 100000))
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def notify_list(ctx: click.Context, states: tuple[str, ...], limit: int, as_json: bool) -> None:
    """The outbox, newest first: each message's state, tries and last error."""
    _, queue = site_and_queue(ctx)
    rows = listing(queue.database, states, limit)
    if as_json:
        echo(json.dumps([_row_json(r) for r in rows], indent=2))
        return
    for r in rows:
        about = f"entry {r.entry_id}" if r.entry_id is not None else (r.condition or "")
        to = r.owner if r.audience == "owner" else "organisers"
        when = f", next try {stamp(r.next_try)}" if r.state == "pending" and r.tries else ""
        echo(f"{r.id:>6} {r.state:<8} {r.kind:<13} to {to:<16} {about:<20} tries {r.tries}{when}"
             + (f": {urls_shown(r.last_error)}" if r.last_error and r.state != "sent" else ""))
    if not rows:
        echo("the outbox is empty" + (f" of {', '.join(states)} messages" if states else ""))


@notify.command("test")
@click.argument("target", metavar="ADDRESS|URL")
@click.pass_context
def notify_test(ctx: click.Context, target: str) -> None:
    """Send one message to ADDRESS (by [notify.smtp]) or URL (a signed webhook) now, and say what happened."""
    notify_site = site_of(ctx).notify
    check_secrets(notify_site)
    shown = target
    if target.startswith(("http://", "https://")):
        shown = url_shown(target)
        if notify_site.webhook_secret_file is None:
            raise VmjudgeError("site.toml [notify] has no webhook_secret_file to sign with: name the file holding "
                               "the webhooks' secret.")
        chosen = webhook_target(notify_site, target)
    elif email_ok(target):
        if notify_site.smtp is None:
            raise VmjudgeError("site.toml has no [notify.smtp] table: say which SMTP server the judge's email goes "
                               "through.")
        chosen = email_target(notify_site, target)
    else:
        raise VmjudgeError(f"{target!r} is neither an email address nor an http(s):// URL: give one of them.")
    message = Message(kind="test", subject="vmjudge: a test message",
                      text=f"This is a test message from vmjudge, sent {stamp(time.time())}.\n",
                      delivery=f"vmjudge-test-{secrets.token_hex(8)}", data={"test": True})
    try:
        said = chosen.send(message)
    except DeliveryError as exc:
        raise VmjudgeError(f"not sent to {shown}: {exc}" + ("" if exc.permanent else " (the judge's sender would try "
                                                                                      "again later)")) from None
    echo(f"sent to {shown}: {said}")
