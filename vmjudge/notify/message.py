"""One notification as the channels carry it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import VmjudgeError


class DeliveryError(VmjudgeError):
    """A message not delivered. `permanent`: trying again would be refused the same way (an
    address the server rejects, a webhook answering 4xx), so it is not tried again."""

    def __init__(self, message: str, permanent: bool = False):
        super().__init__(message)
        self.permanent = permanent


@dataclass(frozen=True)
class Message:
    """`subject` and `text` for email; `data` is the webhook's JSON body (kind, ids and the same
    text). `delivery` is the same for every try of one message, so a receiver that sees it twice
    (the judge died between sending and recording it) can drop the second: the email's
    Message-ID, the webhook's X-Vmjudge-Delivery header."""

    kind: str
    subject: str
    text: str
    delivery: str
    data: dict[str, Any] = field(default_factory=dict)
