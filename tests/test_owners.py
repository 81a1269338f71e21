"""`vmjudge owner add | list | revoke` as commands, on a SQLite home and on a PostgreSQL one:
the token is printed once and only its sha256 is stored; revoking stops it at once."""

from __future__ import annotations

import hashlib
import json

from vmjudge.queue.owners import Owners

from .web_home import WebHome


def test_owner_add_list_revoke_on_both_backends(tmp_path, queue_location):
    home = WebHome(tmp_path, queue_location)
    added = home.vmjudge("owner", "add", "alice")
    assert added.returncode == 0, added.stderr
    token = added.stdout.strip()
    assert len(token) >= 43 and "\n" not in token  # token_urlsafe(32): 43 characters, alone on stdout
    assert "not shown again" in added.stderr
    organiser = home.vmjudge("owner", "add", "olga", "--organiser").stdout.strip()

    owners = Owners(home.queue.database)
    stored = {o.name: o for o in owners.all()}
    assert stored["alice"].token_sha256 == hashlib.sha256(token.encode()).hexdigest()
    with home.queue.database.connect() as db:  # the token itself is nowhere in the database
        rows = [dict(r) for r in db.execute("SELECT * FROM owners").fetchall()]
    assert token not in json.dumps(rows) and organiser not in json.dumps(rows)
    assert owners.by_token(token).name == "alice" and owners.by_token(organiser).organiser
    assert owners.by_token(token + "x") is None

    listed = json.loads(home.vmjudge("owner", "list", "--json").stdout)
    assert [(o["name"], o["organiser"], o["revoked_at"]) for o in listed] == [("alice", False, None),
                                                                             ("olga", True, None)]
    assert token not in home.vmjudge("owner", "list").stdout

    again = home.vmjudge("owner", "add", "alice")
    assert again.returncode == 1 and again.stderr == ("vmjudge: the owner 'alice' already has a token: `vmjudge owner "
                                                      "revoke alice` first, then add it again for a new one.\n")
    assert home.vmjudge("owner", "revoke", "alice").returncode == 0
    assert owners.by_token(token) is None
    assert json.loads(home.vmjudge("owner", "list", "--json").stdout)[0]["revoked_at"] is not None
    unknown = home.vmjudge("owner", "revoke", "nobody")
    assert unknown.returncode == 1 and "no owner named 'nobody' holds a token" in unknown.stderr

    new = home.vmjudge("owner", "add", "alice").stdout.strip()  # a revoked owner gets a new token
    assert new != token and owners.by_token(new).name == "alice" and owners.by_token(token) is None


def test_owner_names_are_refused_as_submit_refuses_owners(tmp_path):
    home = WebHome(tmp_path)
    for bad in ("", "a\nb", "x\u202ey", " alice", "a" * 65):
        proc = home.vmjudge("owner", "add", bad)
        assert proc.returncode == 1 and "is not allowed" in proc.stderr and "Traceback" not in proc.stderr
    assert Owners(home.queue.database).all() == []
