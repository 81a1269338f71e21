"""What participants are told when the judge's side fails (issue 30): a sentence fit for them,
never a path, a host, a database URL or an exception, while the organiser's log keeps the
detail. A real `vmjudge web` process, its queue made unusable under it: on SQLite the database
file replaced by a directory, on PostgreSQL the database dropped (its connections cut)."""

from __future__ import annotations

import html
import logging
import shutil
from pathlib import Path

import httpx
import psycopg

from vmjudge.web.failures import UNAVAILABLE

from .web_home import CSRF, WebHome
from .web_process import running_portal


def break_queue(web: WebHome, location: str | Path, moved: Path) -> str:
    """Make the portal's queue unusable; what the organiser's log names it by."""
    if isinstance(location, str):
        name = location.split("///", 1)[1].split("?", 1)[0]
        with psycopg.connect(location.replace(f"///{name}?", "///postgres?"), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        return location
    db = web.site.layout.queue_db
    moved.mkdir()
    for path in db.parent.glob(db.name + "*"):
        shutil.move(path, moved / path.name)
    db.mkdir()  # SQLite cannot open a directory: "unable to open database file"
    return str(db)


def test_a_queue_that_cannot_be_used_gives_participants_a_sentence_and_the_log_its_detail(tmp_path, queue_location):
    web = WebHome(tmp_path, queue_location)
    token = web.owners.add("alice")
    archive = web.tar("a-entry.tar.gz")
    with running_portal(web.home, tmp_path / "portal.log") as portal, \
            httpx.Client(base_url=portal.base, timeout=30) as browser:
        csrf = CSRF.search(browser.get("/signin").text)
        assert csrf and browser.post("/signin", data={"token": token, "csrf": csrf.group(1)}).status_code == 303
        assert browser.get("/entries").status_code == 200
        where = break_queue(web, queue_location, tmp_path / "moved")

        bearer = {"Authorization": f"Bearer {token}"}
        with archive.open("rb") as f:
            answers = {"page": browser.get("/entries"), "report": browser.get("/entries/1"),
                       "upload form": browser.get("/upload"), "board": browser.get("/leaderboards/adm"),
                       "api list": browser.get("/api/entries", headers=bearer),
                       "api upload": browser.post("/api/entries", data={"challenge": "adm"},
                                                  files={"archive": (archive.name, f)}, headers=bearer)}
        for what, answer in answers.items():
            said = answer.json()["error"] if what.startswith("api") else html.unescape(answer.text)
            assert answer.status_code == 503 and UNAVAILABLE in said, what
            for secret in (str(tmp_path), "/var/tmp", "queue.db", "postgres", "sqlite", "psycopg", "Error",
                           "Traceback", "vmjudge challenge add"):
                assert secret not in answer.text, (what, secret)
        logged = portal.logged()
    assert f"the portal could not answer GET /entries: the queue database {where} cannot be used now" in logged
    assert "the portal could not answer POST /api/entries" in logged and "Traceback" not in logged


def test_a_challenge_whose_files_are_gone_is_the_organisers_to_know_not_the_participants(tmp_path, caplog):
    web = WebHome(tmp_path)
    token = web.owners.add("alice")
    shutil.rmtree(tmp_path / "adm")  # registered, but its directory is gone from this host
    with caplog.at_level(logging.INFO, logger="vmjudge"), web.tar("a-entry.tar.gz").open("rb") as f:
        answer = web.client().post("/api/entries", data={"challenge": "adm"}, files={"archive": ("a-entry.tar.gz", f)},
                                   headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 503 and answer.json() == {"error": UNAVAILABLE}
    logged = [r.getMessage() for r in caplog.records if r.name == "vmjudge.web"]
    assert any(str(tmp_path / "adm" / "challenge.toml") in line for line in logged), logged
    assert web.spooled() == [] and web.uploads_left() == [] and web.queue.entries() == []
