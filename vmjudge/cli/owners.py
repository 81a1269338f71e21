"""`vmjudge owner add | list | set | approve | revoke`: the accounts of the participants' portal (`vmjudge web`),
and the address each may give to hear when its entries are judged (issue 35, opt-in).

`add` prints the new sign-in token once, alone on stdout (only its sha256 is kept), so it can
be piped to whoever passes it on; `revoke` stops the token, and every session signed in with
it, at once.

An address given here is trusted as confirmed (issue 54): the organiser typed it. One the
participant set on the portal is listed "(unconfirmed)" until its link is followed; setting it
here again confirms it.
"""

from __future__ import annotations

import json

import click

from ..notify.confirm import approved_mail
from ..queue.accounts import Accounts, waiting_line
from ..queue.owners import Owners
from .echo import echo
from .home import site_and_queue


def _owners(ctx: click.Context) -> Owners:
    _, queue = site_and_queue(ctx)
    return Owners(queue.database)


@click.group("owner")
def owner() -> None:
    """Accounts of the participants' portal."""


@owner.command("add")
@click.argument("name")
@click.option("--organiser", is_flag=True, help="May see every entry, attempts and logs in the portal.")
@click.option("--email", default=None, metavar="ADDR",
              help="Email ADDR when an entry of NAME's is judged (opt-in; trusted as confirmed).")
@click.pass_context
def owner_add(ctx: click.Context, name: str, organiser: bool, email: str | None) -> None:
    """Add NAME and print its sign-in token (shown this once: only its hash is kept)."""
    token = _owners(ctx).add(name, organiser, email)
    echo(token)
    echo(f"{name}{' (organiser)' if organiser else ''} added: give them the token above; it is not shown again.",
         err=True)


@owner.command("list")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def owner_list(ctx: click.Context, as_json: bool) -> None:
    """Every owner: name, organiser or not, when added, revoked or not (never a token)."""
    owners = _owners(ctx).all()
    if as_json:
        echo(json.dumps([{"name": o.name, "organiser": o.organiser, "created_at": o.created_at,
                          "revoked_at": o.revoked_at, "email": o.email,
                          "email_confirmed": o.confirmed_email is not None, "awaiting": o.awaiting}
                         for o in owners], indent=2))
        return
    for o in owners:
        role = "organiser" if o.organiser else "participant"
        echo(f"{o.name:<24} {role:<12} added {o.created_at}" + (f", revoked {o.revoked_at}" if o.revoked_at else "")
             + (f", email {o.email}" + ("" if o.confirmed_email else " (unconfirmed)") if o.email else "")
             + (f", {waiting_line(o)}" if o.awaiting else ""))
    if not owners:
        echo("no owners yet: `vmjudge owner add NAME` makes one")


@owner.command("set")
@click.argument("name")
@click.option("--email", default=None, metavar="ADDR",
              help="Email ADDR when an entry of NAME's is judged (trusted as confirmed: you typed it).")
@click.option("--no-email", is_flag=True, help="Send NAME no email from now on.")
@click.pass_context
def owner_set(ctx: click.Context, name: str, email: str | None, no_email: bool) -> None:
    """Change NAME's settings: the address it hears of its entries at, or none."""
    if (email is None) == (not no_email):
        raise click.UsageError("give either --email ADDR or --no-email.")
    _owners(ctx).set_email(name, None if no_email else email)
    echo(f"{name} hears of its entries at {email}." if email else f"{name} gets no email from now on.")


@owner.command("approve")
@click.argument("name")
@click.pass_context
def owner_approve(ctx: click.Context, name: str) -> None:
    """Let NAME, an account made on the portal (site.toml [portal] registration = "approve"), sign in from now;
    it is told so by mail."""
    site, queue = site_and_queue(ctx)
    portal_url = site.notify.portal_url
    Accounts(queue.database).approve(name, approved_mail(portal_url) if portal_url else None)
    echo(f"{name} is approved: it signs in by a link mailed to its address.")


@owner.command("revoke")
@click.argument("name")
@click.pass_context
def owner_revoke(ctx: click.Context, name: str) -> None:
    """Stop NAME's token and every session signed in with it, at once: the account is disabled, its entries
    kept."""
    _owners(ctx).revoke(name)
    echo(f"{name}'s token is revoked; `vmjudge owner add {name}` gives a new one.")
