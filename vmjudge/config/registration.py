"""site.toml's [portal]: who may make an account on the portal (issue 58).

"closed" (the default): accounts are the organiser's (`vmjudge owner add`), as before. "approve": a
person signs up with an address, confirms it by the link mailed to it, and waits for an organiser's
`vmjudge owner approve NAME`. "open": confirming the address is enough. Sign-ups mail strangers'
addresses, so they are bounded for the whole portal (`signups_per_hour`) besides each address's own
limit (queue/accounts.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .values import Section

REGISTRATION = ("closed", "approve", "open")


@dataclass(frozen=True)
class PortalSite:
    registration: str = "closed"
    signups_per_hour: int = 60  # sign-ups the whole portal takes in any hour

    @property
    def signs_up(self) -> bool:
        return self.registration != "closed"


def read_portal(source: str, data: dict[str, Any]) -> PortalSite:
    sec = Section(source, "portal", data.get("portal", {}))
    portal = PortalSite(
        registration=sec.get("registration", str, "closed", lambda v: v in REGISTRATION,
                             '"closed", "approve" or "open"'),
        signups_per_hour=sec.get("signups_per_hour", int, PortalSite.signups_per_hour, lambda v: 1 <= v <= 100000,
                                 "a whole number from 1 to 100000"))
    sec.done()
    return portal
