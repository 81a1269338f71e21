"""Teams (#58): made and joined on the portal by an invitation link, or by `vmjudge team`; a member's
upload is the team's entry, held to the team's limits, seen by every member, and one row on the
board; one team per person and challenge, at most [portal] team_size members; a person with entries
of their own joins no team there; a team never signs in. The entries are judged through the queue's
own calls (tests/test_participant_view.py's judge), no VM."""

from __future__ import annotations

import re
import time

import pytest

from vmjudge.config import load_challenge
from vmjudge.errors import EntryError
from vmjudge.queue.admit import enter, prepare
from vmjudge.queue.teams import TeamError, Teams

from .test_participant_view import judge
from .web_home import WebHome, csrf_of, sign_in, upload

INVITE = re.compile(r'class="invite" value="(/teams/join\?token=[^"]+)"')


@pytest.fixture
def portal(tmp_path):
    web = WebHome(tmp_path)
    directory = tmp_path / "tm"
    directory.mkdir()
    (directory / "challenge.toml").write_text('name = "tm"\n[entry]\nmax_size = 65536\n'
                                              "[limits]\npending_per_owner = 2\n[portal]\nteam_size = 2\n")
    web.queue.add_challenge("tm", directory, "key")
    web.tokens = {who: web.owners.add(who) for who in ("ana", "bo", "cy", "di")}
    return web


def signed_in(web, who):
    client = web.client()
    assert sign_in(client, web.tokens[who]).status_code == 303
    return client


def make_team(client, challenge: str, name: str):
    return client.post("/teams", data={"challenge": challenge, "name": name, "csrf": csrf_of(client, "/teams")})


def join(client, link: str):
    return client.post("/teams/join", data={"token": link.split("token=", 1)[1], "csrf": csrf_of(client, link)})


def test_a_team_made_and_joined_on_the_portal_enters_as_one(portal):
    web = portal
    ana, bo, cy = (signed_in(web, who) for who in ("ana", "bo", "cy"))
    assert make_team(ana, "adm", "no-teams").status_code == 400  # adm takes no teams
    assert make_team(ana, "tm", "heartbeat").status_code == 303
    link = INVITE.search(ana.get("/teams").text).group(1)
    page = bo.get(link)
    assert page.status_code == 200 and "Join the team heartbeat in tm" in page.text
    assert join(bo, link).status_code == 303
    assert "ana, bo" in bo.get("/teams").text
    full = join(cy, link)
    assert full.status_code == 400 and "has 2 members, the most tm allows" in full.text
    # ana's upload is the team's entry; bo sees it as his own, and the team's limits hold for both.
    first = upload(ana, web.tar("a-entry.tar.gz"), challenge="tm")
    assert first.status_code == 201
    [entry] = web.queue.entries()
    assert entry.owner == "heartbeat"
    assert f"/entries/{entry.id}" in bo.get("/entries").text and bo.get(f"/entries/{entry.id}").status_code == 200
    assert cy.get(f"/entries/{entry.id}").status_code == 404
    assert upload(bo, web.tar("b-entry.tar.gz"), challenge="tm").status_code == 201
    third = upload(ana, web.tar("c-entry.tar.gz"), challenge="tm")
    assert third.status_code == 429 and "heartbeat has 2" in third.text  # the team's pending_per_owner
    # Judged: one board row, the team's, marked as theirs for each member.
    for e in web.queue.entries():
        judge(web.queue, e.id)
    with web.queue.database.transaction() as db:
        db.execute("UPDATE entries SET published = ?", (time.time() - 1,))
    board = bo.get("/leaderboards/tm").text
    assert board.count('class="owner"') == 1 and "heartbeat" in board and "(your team)" in board
    assert "(your team)" not in cy.get("/leaderboards/tm").text
    # A team never signs in.
    assert web.owners.by_token("x") is None and not web.owners.get("heartbeat").can_sign_in


def test_the_rules_of_joining(portal):
    web = portal
    teams = Teams(web.queue.database)
    team = teams.create("tm", "duo", "ana")
    with pytest.raises(TeamError, match="in the team duo of tm already"):
        teams.create("tm", "other", "ana")
    with pytest.raises(TeamError, match="is taken"):
        teams.create("tm", "bo", "cy")  # a person's name
    cy = signed_in(web, "cy")
    assert upload(cy, web.tar("cy-entry.tar.gz"), challenge="tm").status_code == 201
    with pytest.raises(TeamError, match="has entries of their own in tm"):
        teams.join("tm", "duo", "cy", 2)
    with pytest.raises(TeamError, match="not an account that signs in"):
        teams.join("tm", "duo", "duo", 2)
    # A new invitation stops the old link; a forged one is refused.
    ana = signed_in(web, "ana")
    old = INVITE.search(ana.get("/teams").text).group(1)
    teams.new_invite("tm", "duo")
    di = signed_in(web, "di")
    assert join(di, old).status_code == 400
    assert di.get("/teams/join?token=forged.token").status_code == 400
    bad = make_team(di, "tm", "a b")  # a name not allowed: refused in a sentence, not a failure of the judge
    assert bad.status_code == 400 and "is not allowed" in bad.text
    assert join(di, INVITE.search(ana.get("/teams").text).group(1)).status_code == 303
    assert teams.get("tm", "duo").members == ("ana", "di") and team.members == ("ana",)
    assert web.client().get(old).status_code == 401  # joining needs the person signed in


def test_the_organisers_commands(portal):
    web = portal
    made = web.vmjudge("team", "create", "tm", "pair", "--member", "bo", "--member", "cy")
    assert made.returncode == 0 and "pair of tm: bo, cy." in made.stdout
    assert "pair" in web.vmjudge("team", "list", "tm").stdout
    over = web.vmjudge("team", "add", "tm", "pair", "di")
    assert over.returncode != 0 and "has 2 members" in over.stderr
    assert "a team" in web.vmjudge("owner", "list").stdout
    removed = web.vmjudge("team", "remove", "tm", "pair", "cy")
    assert removed.returncode == 0 and "pair of tm: bo." in removed.stdout
    assert web.vmjudge("team", "add", "tm", "pair", "di").returncode == 0
    web.vmjudge("owner", "revoke", "pair")
    again = web.vmjudge("owner", "add", "pair")  # a team never becomes a person who signs in
    assert again.returncode != 0 and "is a team's name" in again.stderr
    refused = web.vmjudge("team", "list", "adm")
    assert refused.returncode != 0 and "adm takes no teams" in refused.stderr


def test_joining_a_team_while_ones_upload_is_on_its_way_refuses_the_upload(portal):
    """The portal decides who an upload is for as its form arrives, and queues it once the archive is in: a
    join in between must not leave a person with entries of their own beside their team's."""
    web = portal
    ch = load_challenge(web.queue.challenge_dir("tm"))
    prepared = prepare(web.site, "tm", ch, web.tar("bo-entry.tar.gz"), "bo")  # bo's own, as the form said
    Teams(web.queue.database).create("tm", "late-duo", "bo")
    with pytest.raises(EntryError) as caught:
        enter(web.site, web.queue, "tm", ch, prepared, "bo", False, rate_limited=True, person="bo")
    assert caught.value.reason == "team-changed" and web.queue.entries() == []
