"""Email over SMTP, with the standard library: STARTTLS or TLS from the first byte (plain only
to a server on this machine, config/notify.py), the certificate and name checked against the
system's authorities or [notify.smtp] ca_file, credentials from a file only the daemon's user
can read. Every step is bounded by `timeout`: a server that hangs costs the sender that long."""

from __future__ import annotations

import smtplib
import ssl
from email.message import EmailMessage
from email.utils import formatdate
from pathlib import Path

from ..config.notify import SmtpSite
from .message import DeliveryError, Message
from .secrets import credentials


def tls_context(ca_file: Path | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def mail_of(site: SmtpSite, to: str, message: Message) -> EmailMessage:
    mail = EmailMessage()
    mail["From"] = site.sender
    mail["To"] = to
    mail["Subject"] = " ".join(message.subject.split())  # a name with a line break cannot add a header
    mail["Date"] = formatdate(usegmt=True)
    mail["Message-ID"] = f"<{message.delivery}@vmjudge>"
    mail.set_content(message.text)
    return mail


def send(site: SmtpSite, to: str, message: Message, timeout: float) -> str:
    """Deliver `message` to `to`; what the server said. DeliveryError (permanent when the server
    refused the address or the message for good, 5xx) otherwise."""
    login = credentials(site.credentials_file) if site.credentials_file else None
    where = f"{site.host}:{site.port}"
    try:
        if site.security == "tls":
            client: smtplib.SMTP = smtplib.SMTP_SSL(site.host, site.port, timeout=timeout,
                                                    context=tls_context(site.ca_file))
        else:
            client = smtplib.SMTP(site.host, site.port, timeout=timeout)
        with client:
            if site.security == "starttls":
                client.starttls(context=tls_context(site.ca_file))
            if login is not None:
                client.login(*login)
            refused = client.send_message(mail_of(site, to, message))
            if refused:
                raise DeliveryError(f"{where} refused {to}: {refused[to]}", permanent=True)
            return f"accepted by {where}"
    except smtplib.SMTPResponseException as exc:
        said = exc.smtp_error.decode(errors="replace") if isinstance(exc.smtp_error, bytes) else str(exc.smtp_error)
        raise DeliveryError(f"{where} answered {exc.smtp_code} {said}", permanent=500 <= exc.smtp_code < 600) \
            from None
    except smtplib.SMTPRecipientsRefused as exc:
        raise DeliveryError(f"{where} refused {to}: {exc.recipients}", permanent=True) from None
    except (smtplib.SMTPException, OSError) as exc:
        raise DeliveryError(f"{where}: {type(exc).__name__}: {exc}") from None
