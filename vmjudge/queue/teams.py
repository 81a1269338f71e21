"""Teams (issue 58): people who enter a challenge together, with one board row.

A team is an owner of the owners table that never signs in (`awaiting` "team": no session, no token
takes it), so everything the judge keeps per owner is the team's without a second path through
it: entries, the limits of [limits] and the VM-hour budgets, fair share, the board's row. A member
uploading to the team's challenge submits as the team (`entrant`); the same person enters other
challenges alone or in other teams, one team per challenge. A person who has entries of their own
in a challenge joins no team there: their board row would be split between the two.

A team has at most the challenge's [portal] team_size members. Members join by the team's
invitation link, which signs the team's `invite` nonce (web/teams.py), so a new nonce (`vmjudge
team invite`) stops every link given out before; or the organisers add them (`vmjudge team add`).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from ..errors import VmjudgeError
from .accounts import TEAM, sign_up_name
from .connection import Database, Db
from .owners import OwnerError, token_hash
from .rows import now


class TeamError(OwnerError):
    """A team that cannot be made or joined as asked."""


@dataclass(frozen=True)
class Team:
    challenge: str
    name: str
    created_by: str
    created_at: str
    invite: str
    members: tuple[str, ...]


class Teams:
    def __init__(self, database: Database):
        self.database = database

    def _check_member(self, db: Db, challenge: str, person: str) -> None:
        db.lock(f"admit {challenge} {person}")  # an upload of theirs being queued: it sees this join, or it was first
        row = db.execute("SELECT awaiting, revoked_at FROM owners WHERE name = ?", (person,)).fetchone()
        if row is None or row["revoked_at"] is not None or row["awaiting"] is not None:
            raise TeamError(f"{person!r} is not an account that signs in: only people join teams.")
        team = db.execute("SELECT team FROM team_members WHERE challenge = ? AND owner = ?",
                          (challenge, person)).fetchone()
        if team is not None:
            raise TeamError(f"{person} is in the team {team['team']} of {challenge} already: one team per challenge.")
        own = db.execute("SELECT COUNT(*) FROM entries WHERE challenge = ? AND owner = ?",
                         (challenge, person)).fetchone()
        if int(own[0]):
            raise TeamError(f"{person} has entries of their own in {challenge}, so joins no team there (the board "
                            "would show them twice): teams are made before their members' first entries.")

    def create(self, challenge: str, name: str, founder: str) -> Team:
        """`founder`'s team `name` of `challenge`, with `founder` its first member."""
        sign_up_name(name)
        with self.database.transaction() as db:
            db.lock("teams")  # a name is unique over every challenge's teams and every owner
            if db.execute("SELECT 1 FROM owners WHERE name = ?", (name,)).fetchone() is not None:
                raise TeamError(f"The name {name!r} is taken: choose another.")
            self._check_member(db, challenge, founder)
            db.execute("INSERT INTO owners (name, token_sha256, organiser, created_at, awaiting) "
                       "VALUES (?, ?, 0, ?, ?)", (name, token_hash(secrets.token_urlsafe(32)), now(), TEAM))
            db.execute("INSERT INTO teams (challenge, name, created_by, created_at, invite) VALUES (?, ?, ?, ?, ?)",
                       (challenge, name, founder, now(), secrets.token_urlsafe(16)))
            db.execute("INSERT INTO team_members (challenge, owner, team, joined_at) VALUES (?, ?, ?, ?)",
                       (challenge, founder, name, now()))
        return self.get(challenge, name)

    def join(self, challenge: str, name: str, person: str, size: int, invite: str | None = None) -> Team:
        """`person` joins the team, if it has room (`size`) and, given, `invite` is its current nonce."""
        with self.database.transaction() as db:
            db.lock("teams")
            team = db.execute("SELECT invite FROM teams WHERE challenge = ? AND name = ?", (challenge, name)).fetchone()
            if team is None or (invite is not None and not secrets.compare_digest(team["invite"], invite)):
                raise TeamError("This invitation is not valid: ask the team for its current link.")
            self._check_member(db, challenge, person)
            count = int(db.execute("SELECT COUNT(*) FROM team_members WHERE challenge = ? AND team = ?",
                                   (challenge, name)).fetchone()[0])
            if count >= size:
                raise TeamError(f"The team {name} has {count} members, the most {challenge} allows.")
            db.execute("INSERT INTO team_members (challenge, owner, team, joined_at) VALUES (?, ?, ?, ?)",
                       (challenge, person, name, now()))
        return self.get(challenge, name)

    def remove(self, challenge: str, name: str, person: str) -> Team:
        """The organisers' `team remove`: `person` leaves the team; its entries stay the team's."""
        with self.database.transaction() as db:
            db.lock("teams")
            db.lock(f"admit {challenge} {person}")
            done = db.execute("DELETE FROM team_members WHERE challenge = ? AND team = ? AND owner = ?",
                              (challenge, name, person)).rowcount
        if done != 1:
            raise TeamError(f"{person} is not in the team {name} of {challenge}: `vmjudge team list {challenge}` shows "
                            "who is.")
        return self.get(challenge, name)

    def new_invite(self, challenge: str, name: str) -> Team:
        with self.database.transaction() as db:
            done = db.execute("UPDATE teams SET invite = ? WHERE challenge = ? AND name = ?",
                              (secrets.token_urlsafe(16), challenge, name)).rowcount
        if done != 1:
            raise TeamError(f"{challenge} has no team {name!r}: `vmjudge team list {challenge}` shows its teams.")
        return self.get(challenge, name)

    def get(self, challenge: str, name: str) -> Team:
        with self.database.connect() as db:
            row = db.execute("SELECT * FROM teams WHERE challenge = ? AND name = ?", (challenge, name)).fetchone()
            members = db.execute("SELECT owner FROM team_members WHERE challenge = ? AND team = ? ORDER BY joined_at, "
                                 "owner", (challenge, name)).fetchall()
        if row is None:
            raise TeamError(f"{challenge} has no team {name!r}: `vmjudge team list {challenge}` shows its teams.")
        return Team(challenge=row["challenge"], name=row["name"], created_by=row["created_by"],
                    created_at=row["created_at"], invite=row["invite"], members=tuple(r["owner"] for r in members))

    def of_challenge(self, challenge: str) -> list[Team]:
        with self.database.connect() as db:
            names = [r["name"] for r in db.execute("SELECT name FROM teams WHERE challenge = ? ORDER BY name",
                                                   (challenge,)).fetchall()]
        return [self.get(challenge, name) for name in names]

    def of_person(self, person: str) -> list[Team]:
        """The teams `person` is in, one per challenge."""
        with self.database.connect() as db:
            rows = db.execute("SELECT challenge, team FROM team_members WHERE owner = ? ORDER BY challenge",
                              (person,)).fetchall()
        return [self.get(r["challenge"], r["team"]) for r in rows]

    def entrant(self, challenge: str, person: str) -> str:
        """Who `person`'s entries to `challenge` are submitted as: their team there, or themselves."""
        with self.database.connect() as db:
            row = db.execute("SELECT team FROM team_members WHERE challenge = ? AND owner = ?",
                             (challenge, person)).fetchone()
        return person if row is None else str(row["team"])

    def owners_seen_by(self, person: str) -> tuple[str, ...]:
        """The owners whose entries `person` sees as their own: themselves and each of their teams."""
        return (person, *(t.name for t in self.of_person(person)))


def no_teams(challenge: str) -> VmjudgeError:
    return TeamError(f"{challenge} takes no teams: its organisers set [portal] team_size to allow them.")
