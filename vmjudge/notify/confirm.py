"""The link that confirms a participant's address (issue 54), and the one mail that carries it.

An address a participant types on the portal is only a claim: without a check, the judge's
mail server would send the organisers' mail to any address a participant chose. So the
address is used only after the reader of its mailbox follows a link sent to it:

    PORTAL/settings/confirm?token=<owner>.<when signed>.<signature>

made by web/confirm_link.py with itsdangerous (already the portal's, for its session cookie): a URL-safe, timed,
HMAC-signed serializer keyed with the portal's own secret (HOME/web-session.key,
web/secret.py), so only the judge makes tokens. Its salt names what the token is for and the
address it confirms, so a token is never taken for a session cookie or the other way round,
and binds the owner (signed), the address (in the salt, not in the token: it is the owner's
current one, read when the link is followed, so the link carries no text the participant chose)
and when it was signed: a token given another owner's name or another time, or followed after
the owner changed its address, fails the signature; one older than VALID_SECONDS has expired.

The mail itself says only what the judge says: the portal's address (the organisers'), the
address it went to, the link and when it expires. No owner name (an organiser may have taken
it from the participant), no text of the participant's: the portal cannot be used to send
chosen words to a stranger.
"""

from __future__ import annotations

import time

KIND = "email-confirm"  # its outbox rows' kind
SIGNIN = "signin-link"  # a sign-in link mailed to an account's confirmed address (issue 58)
APPROVED = "account-approved"  # an account the organisers approved, told so
AS_WRITTEN = (KIND, SIGNIN, APPROVED)  # the owners' mails whose text is written with the event
VALID_SECONDS = 24 * 3600


NOT_VALID = ("This link is not valid: it was changed, or the address it confirms is no longer the one set; sign in "
             "and send a new link from Settings.")
EXPIRED = (f"This link has expired (a link lasts {VALID_SECONDS // 3600} hours): sign in and send a new link from "
           "Settings.")


def mail(portal_url: str, address: str, link_token: str, until: int) -> tuple[str, str]:
    """The confirmation's subject and text: the judge's words, the address and the link only."""
    expires = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(until))
    text = (f"Someone using the judge at {portal_url} asked for its emails about their entries to go to {address}.\n\n"
            f"If that was you, open this link and press \"Confirm\" (it works until {expires}):\n\n"
            f"{portal_url}/settings/confirm?token={link_token}\n\n"
            "If it was not you, ignore this message: nothing more is sent to this address unless the link is "
            "followed.\n")
    return "Confirm your address for the judge's emails", text


def signup_mail(portal_url: str, address: str, link_token: str, until: int) -> tuple[str, str]:
    """A sign-up's confirmation: as mail(), for an account made on the portal."""
    expires = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(until))
    text = (f"Someone signed up to the judge at {portal_url} with this address, {address}.\n\n"
            f"If that was you, open this link and press \"Confirm\" (it works until {expires}):\n\n"
            f"{portal_url}/settings/confirm?token={link_token}\n\n"
            "If it was not you, ignore this message: the account lapses unless the link is followed.\n")
    return "Confirm your address to finish signing up", text


def signin_mail(portal_url: str, link_token: str, minutes: int) -> tuple[str, str]:
    """A sign-in link, for whoever reads the account's mailbox: no name, no text of anyone's."""
    text = (f"Someone asked to sign in to the judge at {portal_url} with this address.\n\n"
            f"If that was you, open this link and press \"Sign in\" (it works once, for {minutes} minutes):\n\n"
            f"{portal_url}/signin/link?token={link_token}\n\n"
            "If it was not you, ignore this message: no one is signed in unless the link is followed.\n")
    return "Your link to sign in to the judge", text


def approved_mail(portal_url: str) -> tuple[str, str]:
    text = (f"The organisers approved your account on the judge at {portal_url}.\n\n"
            f"Sign in at {portal_url}/signin with a link mailed to this address.\n")
    return "Your account on the judge is approved", text
