"""URLs as messages and logs may show them: a PostgreSQL URL without its password (the
queue's `where`), a webhook's without its path and query (notifications)."""

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


# An http(s) URL inside a text: up to the next space, quote or bracket that cannot be in one.
URL_IN_TEXT = re.compile(r"https?://[^\s'\"<>()\[\]{}]+", re.I)


def url_shown(url: str) -> str:
    """A webhook's URL for messages and logs: scheme://host[:port]/… only. Webhook URLs often
    carry their secret in the path or the query (Slack's, Discord's, a `?token=`), and whoever
    holds one can post to the organisers' channel; user:password@ goes too."""
    head, sep, rest = url.partition("://")
    if not sep:
        return "…"
    netloc = re.match(r"[^/?#]*", rest).group(0).rpartition("@")[2]  # type: ignore[union-attr]
    return f"{head.lower()}://{netloc}/…"


def urls_shown(text: str) -> str:
    """`text` with every http(s) URL in it shown as url_shown does (an error stored before the
    judge redacted its webhooks, a receiver's answer that quoted the path)."""
    def shown(match: re.Match[str]) -> str:
        url = match.group(0).rstrip(".,:;!?")  # the sentence's punctuation after it stays
        return url_shown(url) + match.group(0)[len(url):]
    return URL_IN_TEXT.sub(shown, text)
