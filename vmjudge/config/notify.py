"""site.toml [notify] and [notify.smtp]: who hears of what the judge does, and how (issue 35).

Two channels: email over SMTP, to the organisers listed here and to participants who gave their
address (`vmjudge owner add NAME --email ADDR`), and webhooks, HTTPS POSTs of JSON signed with a
secret, to the organisers' own services. Nothing here is read from a secret file: the files'
paths are checked when a channel is used (notify/secrets.py), as the daemon's user, so that a
command run by someone else can still read site.toml.

Plain http and plain SMTP go only to this machine (loopback): anything else crosses a network,
where an address, a score or a signed body would be read by whoever is on the path.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..errors import ConfigError
from .values import Section

# One address, as an organiser types it: no display name, no spaces, one @, a dotted domain
# (or localhost, for a test's server). The SMTP server decides the rest.
EMAIL_RE = re.compile(r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]{1,64}@(?:[A-Za-z0-9-]{1,63}\.)*[A-Za-z0-9-]{1,63}")
SECURITY = ("starttls", "tls", "none")


def loopback(host: str) -> bool:
    """Whether `host` is this machine: localhost, or an address in 127.0.0.0/8 or ::1."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def email_ok(address: str) -> bool:
    return len(address) <= 254 and EMAIL_RE.fullmatch(address) is not None


def webhook_ok(url: str) -> bool:
    """An https URL, or an http one to this machine (tests, a relay on the same host)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        return False
    if not host or parts.username or parts.password or any(c in url for c in " \r\n\t"):
        return False
    return parts.scheme == "https" or (parts.scheme == "http" and loopback(host))


@dataclass(frozen=True)
class SmtpSite:
    """[notify.smtp]: the server the judge's email goes through. `security` "starttls" (port
    587) upgrades the connection before anything is said, "tls" (port 465) starts in TLS,
    "none" only to a server on this machine. `credentials_file` holds the user on its first line
    and the password on its second; it must be readable by the daemon's user alone. `ca_file`
    trusts a server whose certificate no system authority signed (a test's, a private one)."""

    host: str
    port: int = 587
    security: str = "starttls"
    sender: str = "vmjudge@localhost"
    credentials_file: Path | None = None
    ca_file: Path | None = None


@dataclass(frozen=True)
class NotifySite:
    """[notify]: organisers' addresses and webhooks, how long delivery is tried, and where a
    participant's report is linked. Empty (the default), only `vmjudge notify test` sends.

    A message is tried at most `max_tries` times: the first at once, each next one after twice
    the previous delay (starting at `retry_seconds`), the delays capped so that all the tries
    fit in `give_up_hours`; then it is marked failed, and `vmjudge notify list` shows it.
    `timeout_seconds` bounds each connection's every step, so a server that hangs holds the
    sender, never a stage or a claim. Organisers hear of one condition (entries parked, say)
    at most once an hour; what happens after that is gathered in one digest at the hour's end
    (queue/outbox.py)."""

    organisers: tuple[str, ...] = ()
    webhooks: tuple[str, ...] = ()
    webhook_secret_file: Path | None = None
    webhook_ca_file: Path | None = None  # trusts a receiver whose certificate no system authority signed
    smtp: SmtpSite | None = None
    portal_url: str | None = None
    max_tries: int = 8
    retry_seconds: float = 60.0
    give_up_hours: float = 24.0
    timeout_seconds: float = 20.0
    disk_free_percent: float | None = None  # tell the organisers when the home's disk has less free; None: never

    @property
    def email(self) -> bool:
        return self.smtp is not None


def read_notify(source: str, data: dict[str, Any]) -> NotifySite:
    sec = Section(source, "notify", data.get("notify", {}))
    smtp_data = sec.data.pop("smtp", None)
    organisers = sec.get("organisers", list, [], allowed="a list of email addresses")
    for address in organisers:
        if not isinstance(address, str) or not email_ok(address):
            raise ConfigError(f"{source}: [notify] organisers has {address!r}, which is not allowed: use plain "
                              "addresses such as \"ops@example.org\".")
    # A webhook's URL often holds its secret, so a refusal names it by its place, never quotes it.
    if not isinstance(sec.data.get("webhooks", []), list):
        raise ConfigError(f"{source}: [notify] webhooks is not allowed as written: use a list of https:// URLs, such "
                          "as [\"https://hooks.example.org/vmjudge\"].")
    webhooks = sec.get("webhooks", list, [], allowed="a list of https:// URLs")
    for n, url in enumerate(webhooks, 1):
        if not isinstance(url, str) or not webhook_ok(url):
            raise ConfigError(f"{source}: [notify] webhooks' URL number {n} is not allowed: use an https:// URL "
                              "without user:password@ (http:// only to this machine, such as "
                              "http://127.0.0.1:8080/hook).")
    secret = sec.get("webhook_secret_file", str, None, lambda v: v.startswith("/"),
                     "the absolute path of a file holding the webhooks' signing secret")
    ca_file = sec.get("webhook_ca_file", str, None, lambda v: v.startswith("/"), "an absolute path")
    portal = sec.get("portal_url", str, None, lambda v: webhook_ok(v) or v.startswith("http://"),
                     "the portal's address as participants reach it, such as \"https://judge.example.org\"")
    notify = NotifySite(
        organisers=tuple(organisers), webhooks=tuple(webhooks), webhook_secret_file=Path(secret) if secret else None,
        webhook_ca_file=Path(ca_file) if ca_file else None,
        portal_url=portal.rstrip("/") if portal else None,
        max_tries=sec.get("max_tries", int, NotifySite.max_tries, lambda v: 1 <= v <= 100,
                          "a whole number from 1 to 100"),
        retry_seconds=sec.get("retry_seconds", float, NotifySite.retry_seconds, lambda v: 0.01 <= v <= 86400,
                              "seconds from 0.01 to 86400"),
        give_up_hours=sec.get("give_up_hours", float, NotifySite.give_up_hours, lambda v: 0 < v <= 24 * 7,
                              "hours from 0 to 168"),
        timeout_seconds=sec.get("timeout_seconds", float, NotifySite.timeout_seconds, lambda v: 0.1 <= v <= 300,
                                "seconds from 0.1 to 300"),
        disk_free_percent=sec.get("disk_free_percent", float, None, lambda v: 0 < v < 100,
                                  "a percentage above 0 and below 100"),
        smtp=_smtp(source, smtp_data) if smtp_data is not None else None)
    sec.done()
    if notify.webhooks and notify.webhook_secret_file is None:
        raise ConfigError(f"{source}: [notify] webhooks without webhook_secret_file is not allowed: name the file "
                          "holding the secret their signatures are made with.")
    if notify.organisers and notify.smtp is None:
        raise ConfigError(f"{source}: [notify] organisers without a [notify.smtp] table is not allowed: say which "
                          "SMTP server their email goes through.")
    return notify


def _smtp(source: str, data: Any) -> SmtpSite:
    sec = Section(source, "notify.smtp", data)
    host = sec.get("host", str, None, lambda v: bool(v) and " " not in v, "the SMTP server's name or address")
    if host is None:
        raise ConfigError(f"{source}: [notify.smtp] has no host, which is not allowed: name the SMTP server.")
    security = sec.get("security", str, "starttls", lambda v: v in SECURITY, "\"starttls\", \"tls\" or \"none\"")
    port = sec.get("port", int, 465 if security == "tls" else 587, lambda v: 1 <= v <= 65535,
                   "a port number from 1 to 65535")
    sender = sec.get("from", str, "vmjudge@localhost", email_ok, "the address the judge's email is sent from")
    path = "an absolute path"
    credentials = sec.get("credentials_file", str, None, lambda v: v.startswith("/"), path)
    ca_file = sec.get("ca_file", str, None, lambda v: v.startswith("/"), path)
    sec.done()
    if security == "none" and not loopback(host):
        raise ConfigError(f"{source}: [notify.smtp] security = \"none\" to {host!r} is not allowed: use \"starttls\" "
                          "or \"tls\" (plain SMTP only to a server on this machine).")
    return SmtpSite(host=host, port=port, security=security, sender=sender,
                    credentials_file=Path(credentials) if credentials else None,
                    ca_file=Path(ca_file) if ca_file else None)
