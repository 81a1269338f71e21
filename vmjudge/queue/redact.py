"""A PostgreSQL URL as messages and logs may show it (the queue's `where`)."""

from __future__ import annotations

import re


def redacted(url: str) -> str:
    """A PostgreSQL URL for messages and logs, its password shown as ***: libpq takes one both
    as `user:password@` and as a `password=` parameter, and a message must show neither."""
    head, rest = url.split("://", 1) if "://" in url else ("", url)
    netloc, path = re.match(r"([^/?#]*)(.*)", rest, re.S).groups()  # type: ignore[union-attr]
    userinfo, at, hosts = netloc.rpartition("@")
    if at and ":" in userinfo:
        netloc = f"{userinfo.split(':', 1)[0]}:***@{hosts}"
    base, question, query = path.partition("?")
    if question:
        query = re.sub(r"(^|&)password=[^&]*", r"\1password=***", query)
    return f"{head}://{netloc}{base}{question}{query}" if head else f"{netloc}{base}{question}{query}"
