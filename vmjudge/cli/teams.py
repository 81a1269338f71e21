"""`vmjudge team create | add | remove | list | invite`: the organisers' side of teams (queue/teams.py). People
also make and join teams on the portal's Teams page; the rules are the same either way."""

from __future__ import annotations

import json

import click

from ..config import load_challenge
from ..queue.teams import Team, Teams, no_teams
from .echo import echo
from .home import site_and_queue


def _teams(ctx: click.Context, challenge: str) -> tuple[Teams, int]:
    _, queue = site_and_queue(ctx)
    size = load_challenge(queue.challenge_dir(challenge)).portal.team_size
    if not size:
        raise no_teams(challenge)
    return Teams(queue.database), size


def _said(team: Team) -> str:
    return f"{team.name} of {team.challenge}: {', '.join(team.members) or 'no members'}."


@click.group("team")
def team() -> None:
    """Teams: people who enter a challenge as one, with one board row."""


@team.command("create")
@click.argument("challenge")
@click.argument("name")
@click.option("--member", "members", multiple=True, required=True, metavar="OWNER",
              help="A member, the first one its founder; repeat for each.")
@click.pass_context
def team_create(ctx: click.Context, challenge: str, name: str, members: tuple[str, ...]) -> None:
    """Make the team NAME of CHALLENGE with its members."""
    teams, size = _teams(ctx, challenge)
    if len(members) > size:
        raise click.UsageError(f"{challenge} allows at most {size} members a team.")
    done = teams.create(challenge, name, members[0])
    for member in members[1:]:
        done = teams.join(challenge, name, member, size)
    echo(_said(done))


@team.command("add")
@click.argument("challenge")
@click.argument("name")
@click.argument("member")
@click.pass_context
def team_add(ctx: click.Context, challenge: str, name: str, member: str) -> None:
    """Add MEMBER to the team NAME of CHALLENGE."""
    teams, size = _teams(ctx, challenge)
    echo(_said(teams.join(challenge, name, member, size)))


@team.command("remove")
@click.argument("challenge")
@click.argument("name")
@click.argument("member")
@click.pass_context
def team_remove(ctx: click.Context, challenge: str, name: str, member: str) -> None:
    """Take MEMBER out of the team NAME of CHALLENGE; the team's entries stay the team's."""
    teams, _ = _teams(ctx, challenge)
    echo(_said(teams.remove(challenge, name, member)))


@team.command("list")
@click.argument("challenge")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def team_list(ctx: click.Context, challenge: str, as_json: bool) -> None:
    """CHALLENGE's teams and their members."""
    teams, _ = _teams(ctx, challenge)
    found = teams.of_challenge(challenge)
    if as_json:
        echo(json.dumps([{"name": t.name, "members": list(t.members), "created_by": t.created_by,
                          "created_at": t.created_at} for t in found], indent=2))
        return
    for t in found:
        echo(f"{t.name:<24} {', '.join(t.members)}")
    if not found:
        echo(f"{challenge} has no teams yet")


@team.command("invite")
@click.argument("challenge")
@click.argument("name")
@click.pass_context
def team_invite(ctx: click.Context, challenge: str, name: str) -> None:
    """Stop every invitation link of the team NAME given out so far; its members see the new one on Teams."""
    teams, _ = _teams(ctx, challenge)
    teams.new_invite(challenge, name)
    echo(f"{name}'s invitation links given out before no longer work.")
