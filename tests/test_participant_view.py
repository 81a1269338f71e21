"""#30: nothing of the hidden test set reaches a participant (no VM; a real queue, the real
portal through starlette's TestClient).

The publish time, the masking of an entry being examined, the allow-list, every route of the
portal checked against it, and the brute force that read af2017's hidden labels back from
`reference_sha256` in the participant API, run again: it must find nothing.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import time
from pathlib import Path

import pytest
from starlette.routing import Mount, Route

from vmjudge.queue import publish
from vmjudge.queue.db import Queue
from vmjudge.queue.rows import Scoring, stamp
from vmjudge.reports import participant
from vmjudge.reports.leaderboard import history, leaderboard
from vmjudge.reports.report import report_page, show
from vmjudge.scorers.reference import reference_sha256

from .html_tree import parse
from .test_figures import EXAM, PREP, QUIZ
from .test_queue_hosts import add, hosts
from .web_home import WebHome, sign_in, upload

REPO = Path(__file__).resolve().parent.parent
AF2017 = REPO / "examples" / "af2017"
COUNTS = {"records": 8, "completed": 8, "failed": 0, "timed_out": 0}
HEX64 = re.compile(r"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])")


# The publish time

@pytest.mark.parametrize("seconds, ready, said", [
    (1234.5, 1300.0, 4 * 360.0),   # 4/10 of the hour, ready well before: the report's tenth
    (1234.5, 1500.0, 5 * 360.0),   # ready only after that boundary: the next one after it
    (1.0, 10.0, 360.0),            # any use at all is at least a tenth
    (3600.0, 3700.0, 11 * 360.0),  # at the cap, ready after it: never before the result
])
def test_the_publish_time_is_a_whole_tenth_after_the_exams_start_never_before_the_result(seconds, ready, said):
    started = 1_000_000.0
    assert publish.publish_time(started, seconds, 3600.0, started + ready) == started + said


def test_an_exam_with_no_figures_is_published_on_the_default_step():
    assert publish.publish_time(0.0, None, None, 500.0) == 720.0  # tenths of an hour: 6 min steps


def judge(queue, eid, exam_figures=EXAM, scores=None, scoring=None, exam_counts=COUNTS):
    """prep, quiz and exam passed, then stage 4 scores (all through the queue's own calls)."""
    for stage, figs, nxt in (("prep", PREP, "quiz"), ("quiz", QUIZ, "exam"), ("exam", exam_figures, "score")):
        queue.claim_next(only=eid)
        run = queue.start_stage(eid, stage, 0)
        queue.finish_stage(run, "passed", f"{stage} ok" if stage != "exam" else
                           f"8 test records: {exam_counts['completed']} completed.",
                           {"stage": stage, "iso_sha256": "f" * 64}, next_stage=nxt, figures=figs,
                           exam=exam_counts if stage == "exam" else None)
    queue.claim_next(only=eid)
    run = queue.start_stage(eid, "score", 0)
    scores = scores or {"score": 0.75}
    scoring = scoring or Scoring(eid, "official", "af2017", "af2017/2", "e" * 64, "d" * 64, scores)
    queue.finish_stage(run, "scored", f"score {scores['score']}", {}, outcome="scored", scores=scores,
                       scoring=scoring)


def test_the_queue_records_when_the_exam_started_and_when_its_result_may_be_shown(queue_location, tmp_path):
    (queue,) = hosts(queue_location, tmp_path, "h")
    eid = add(queue, tmp_path)
    before = time.time()
    judge(queue, eid)
    entry = queue.entry(eid)
    exam = next(r for r in queue.stage_runs(eid) if r.stage == "exam")
    assert entry.exam_started == exam.started and before <= entry.exam_started <= time.time()
    # EXAM took 1234.567 s of its 3600 s cap: 4/10, published 24 min after the exam started.
    assert entry.published == pytest.approx(entry.exam_started + 1440.0)
    # The organiser's rerun starts a new evaluation: nothing of the exam is known yet.
    again = queue.rerun(eid)
    assert (again.exam_started, again.published) == (None, None)


def test_a_retried_exam_keeps_its_first_start_and_a_parked_entry_is_published(queue_location, tmp_path):
    (queue,) = hosts(queue_location, tmp_path, "h")
    eid = add(queue, tmp_path)
    for stage, nxt in (("prep", "quiz"), ("quiz", "exam")):
        queue.claim_next(only=eid)
        queue.finish_stage(queue.start_stage(eid, stage, 0), "passed", "ok", {}, next_stage=nxt, figures=PREP)
    starts = []
    for _ in range(3):  # the retry policy parks the entry after its third infrastructure failure
        with queue.database.transaction() as db:
            db.execute("UPDATE entries SET not_before = 0 WHERE id = ?", (eid,))
        assert queue.claim_next(only=eid) is not None
        run = queue.start_stage(eid, "exam", 0)
        starts.append(run.started)
        queue.infra_failure(run, "vm-start", "the VM did not start", {})
    entry = queue.entry(eid)
    assert entry.state == "parked" and entry.exam_started == starts[0]
    assert entry.published is not None and entry.published >= time.time() - 1
    assert (entry.published - starts[0]) % 360.0 == pytest.approx(0.0, abs=1e-6)  # a whole default step


def masked_pair(queue_location, tmp_path):
    """Two entries judged alike up to the exam, then different in everything the exam could
    drive: its time (in the same tenth), its figures, its score."""
    (queue,) = hosts(queue_location, tmp_path, "h")
    a, b = add(queue, tmp_path, owner="owner-a"), add(queue, tmp_path, owner="owner-b")
    slower = {**EXAM, "stage_seconds": 1300.0, "commands": [{**c, "seconds": c["seconds"] + 30}
                                                             for c in EXAM["commands"]]}
    judge(queue, a, EXAM, {"score": 0.25})
    judge(queue, b, slower, {"score": 0.95})
    return queue, a, b


def normalised(doc: dict, entry) -> str:
    """The document with what differs by submission alone (id, owner, archive, its time) as *."""
    doc = {**doc, **dict.fromkeys(("id", "owner", "submitted_at", "archive_name", "archive_sha256"), "*")}
    doc["report"] = doc["report"].replace(f"Entry {entry.id} ", "Entry * ")
    for value in (entry.owner, entry.submitted_at, entry.archive_name):
        doc["report"] = doc["report"].replace(value, "*")
    return json.dumps(doc, sort_keys=True)


def test_while_being_examined_two_entries_look_the_same_whatever_their_exams_did(queue_location, tmp_path):
    queue, a, b = masked_pair(queue_location, tmp_path)
    site = WebHome.__new__(WebHome)  # only show()'s site: its layout is not read for participants
    docs = {}
    for eid in (a, b):
        entry = queue.entry(eid)
        doc = show(site, queue, eid, at=time.time())
        assert (doc["state"], doc["stage"], doc["outcome"], doc["scores"], doc["scorings"]) == \
            ("running", "exam", None, {}, [])
        assert set(doc["figures"]) == {"prep", "quiz"} and "Stage 3" not in doc["report"]
        assert doc["report"].rstrip().endswith("Evaluation in progress: being examined on the test set.")
        docs[eid] = normalised(doc, entry)
        row = participant.entry_row(entry, time.time())
        assert (row["state"], row["stage"], row["score"], row["outcome"]) == ("running", "exam", None, None)
    assert docs[a] == docs[b]
    assert leaderboard(queue, "c", at=time.time()) == []
    assert {r.entry_id for r in leaderboard(queue, "c")} == {a, b}  # the organiser's board: at once


def test_after_the_publish_time_the_result_shows_and_its_times_are_the_publish_time(queue_location, tmp_path):
    queue, a, _ = masked_pair(queue_location, tmp_path)
    entry = queue.entry(a)
    early = show(None, queue, a, at=entry.published - 0.5)
    assert early["stage"] == "exam" and early["scores"] == {}
    doc = show(None, queue, a, at=entry.published)
    assert (doc["state"], doc["outcome"], doc["scores"]) == ("done", "scored", {"score": 0.25})
    assert doc["figures"]["exam"] == {"time_tenths": 4, "time_cap_seconds": 3600.0, "memory_tenths": 5,
                                      "memory_cap": EXAM["vm_memory"]}
    assert [s["at"] for s in doc["scorings"]] == [stamp(entry.published)]  # not when stage 4 really ran
    assert [r.entry_id for r in leaderboard(queue, "c", at=entry.published)] == [a]


def test_the_allow_list_takes_out_what_it_does_not_name_at_every_depth():
    doc = {"id": 1, "secret": "x", "scorings": [{"at": "t", "reference_sha256": "r", "scores": {"F1_N": 1.0}}],
           "figures": {"exam": {"time_tenths": 3, "stage_seconds": 12.3}, "debug": {}},
           "hardware": {"host": "h", "pid": 7}, "exam": {"records": 8, "per_record": {"B0001": 3.2}}}
    assert participant.allowed(doc, participant.ENTRY) == {
        "id": 1, "scorings": [{"at": "t", "scores": {"F1_N": 1.0}}], "figures": {"exam": {"time_tenths": 3}},
        "hardware": {"host": "h"}, "exam": {"records": 8}}


def conforms(value, spec, where="") -> list[str]:
    """What of `value` its allow-list does not name (empty: it conforms)."""
    if spec is participant.LEAF:
        return [] if value is None or isinstance(value, (str, int, float, bool)) else [f"{where}: not a value"]
    if isinstance(spec, list):
        return [p for i, v in enumerate(value) for p in conforms(v, spec[0], f"{where}[{i}]")]
    problems = [f"{where}.{k}" for k in value if k not in spec and participant.ANY not in spec]
    return problems + [p for k, v in value.items() if k in spec or participant.ANY in spec
                       for p in conforms(v, spec.get(k, spec.get(participant.ANY)), f"{where}.{k}")]


# The portal: every route, classified; the participant's answers checked against the list

# None: an HTML page (or, with ?format=text, the report's text), checked below by what it shows.
PARTICIPANT_GETS = {"/entries": None, "/entries.json": participant.ENTRY_LIST, "/entries/{entry_id}": None,
                    "/upload": None, "/leaderboards": None, "/leaderboards/{challenge}": None,
                    "/phases/{challenge}": None, "/settings": None,  # /settings: the owner's own address (#35)
                    "/teams": None, "/teams/join": None}  # #58: the owner's teams (test_teams.py)
API_GETS = {"/api/entries": participant.ENTRY_LIST, "/api/entries/{entry_id}": participant.ENTRY,
            "/api/challenges/{challenge}/phases": participant.PHASES}
# A participant's upload, or an entry carried into a contest's phase: answered in SUBMITTED or a page.
POSTS = {"/upload", "/api/entries", "/entries/{entry_id}/carry", "/api/entries/{entry_id}/carry",
         "/settings/resend",  # the owner's own address's confirmation mailed again (#54)
         "/teams", "/teams/join",  # #58: a team made or joined
         "/settings/token"}  # #58: a new API token, shown once to its owner (test_signup.py)
PUBLIC = {"/", "/signin", "/signout", "/static",
          "/reasons",  # every reason an entry can carry, the same for all (test_reasons.py)
          "/settings/confirm",  # #54: the mailed link, by its token only (test_notify_confirm.py)
          # #58: the challenges' pages, as participant.CHALLENGE(_LIST) (test_challenge_page.py); its downloads
          # signed-in participants' unless the organiser makes them public
          "/challenges/{challenge}", "/challenges/{challenge}/download/{what}", "/api/challenges",
          "/api/challenges/{challenge}",
          # #58: signing up and signing in by a mailed link (test_signup.py)
          "/signup", "/signin/mail", "/signin/link"}
ORGANISER = {"/organiser/entries", "/organiser/parked", "/organiser/queue", "/organiser/entries/{entry_id}",
             "/organiser/entries/{entry_id}/logs"}


def label_sets(records: list[str]):
    for labels in itertools.product("NAO~", repeat=len(records)):
        yield "".join(f"{r},{lab}\n" for r, lab in zip(records, labels, strict=True)).encode()


def brute_force(hashes: set[str], records: list[str]) -> str | None:
    """The attack of #30: every label set of the test records, hashed as reference_sha256
    hashes a reference directory holding it as REFERENCE.csv; the one whose hash was given."""
    for text in label_sets(records):
        digest = hashlib.sha256(b"REFERENCE.csv\0" + hashlib.sha256(text).hexdigest().encode() + b"\n").hexdigest()
        if digest in hashes:
            return text.decode()
    return None


@pytest.fixture
def scored_portal(tmp_path):
    web = WebHome(tmp_path)
    web.queue.add_challenge("af2017", AF2017, "key")
    eid = web.queue.add_entry("af2017", "alice", False, "a" * 64, "alice-entry.tar.gz", web.tar("x.tar.gz"))
    results = hashlib.sha256(b"B0001,A\n").hexdigest()
    judge(web.queue, eid, scoring=Scoring(eid, "official", "af2017", "af2017/2", reference_sha256(AF2017 / "reference"),
                                          results, {"score": 0.75}))
    return web, eid


def participant_answers(web, eid, client, token) -> dict[str, str]:
    """Every participant route's answer for alice's entry, signed in by cookie or by token."""
    bearer = {"Authorization": f"Bearer {token}"}
    answers = {}
    for path in PARTICIPANT_GETS:
        url = path.replace("{entry_id}", str(eid)).replace("{challenge}", "af2017")
        answers[url] = client.get(url).text
        answers[url + "?late=1"] = client.get(url + "?late=1").text
        answers[url + "?format=text"] = client.get(url + "?format=text").text
    for path in API_GETS:
        url = path.replace("{entry_id}", str(eid)).replace("{challenge}", "af2017")
        answers[url] = client.get(url, headers=bearer).text
    return answers


def test_every_route_is_classified_and_the_participants_answers_hold_to_the_list(scored_portal):
    web, eid = scored_portal
    app = web.app()
    paths = {r.path for r in app.routes if isinstance(r, (Route, Mount))}
    assert paths == set(PARTICIPANT_GETS) | set(API_GETS) | POSTS | PUBLIC | ORGANISER, \
        "a route was added: classify it here, and build its answer in reports/participant.py"
    with web.queue.database.transaction() as db:  # the publish time has come
        db.execute("UPDATE entries SET published = ? WHERE id = ?", (time.time() - 1, eid))
    token = web.vmjudge("owner", "add", "alice").stdout.strip().split()[-1]
    client = web.client()
    assert sign_in(client, token).status_code == 303
    answers = participant_answers(web, eid, client, token)
    assert all("0.75" in answers[p] for p in ("/entries", f"/entries/{eid}", "/leaderboards/af2017"))
    for path, spec in {**PARTICIPANT_GETS, **API_GETS}.items():
        if spec is not None:
            url = path.replace("{entry_id}", str(eid)).replace("{challenge}", "af2017")
            assert conforms(json.loads(answers[url]), spec) == [], url
    # The pages are built from the participant's documents (#38): the report page from
    # REPORT_PAGE, the board's chart from BOARD_HISTORY; the exam shows as tenths, nothing finer.
    assert conforms(report_page(web.queue, eid), participant.REPORT_PAGE) == []
    assert conforms(participant.board_history(history(web.queue, "af2017", at=time.time())),
                    participant.BOARD_HISTORY) == []
    exam = parse(answers[f"/entries/{eid}"]).one("li", id="step-exam")
    assert [(m.attrs["value"], m.attrs["max"]) for m in exam.all("meter")] == [("4", "10"), ("5", "10")]
    assert "<circle" in answers["/leaderboards/af2017"]
    finer = [f"{EXAM['stage_seconds']}", f"{EXAM['stage_seconds']:.1f}", *(c["name"] for c in EXAM["commands"]),
             *(f"{c['seconds']}" for c in EXAM["commands"])]  # their tenths of a second are the quiz's too
    assert [(url, f) for url, text in answers.items() for f in finer if f in text] == []
    posted = upload(client, web.tar("y-entry.tar.gz"), "big")
    assert posted.status_code == 201
    api = client.post("/api/entries", headers={"Authorization": f"Bearer {token}"}, data={"challenge": "big"},
                      files={"archive": ("z-entry.tar.gz", web.tar("z-entry.tar.gz").read_bytes())})
    assert api.status_code == 201 and conforms(api.json(), participant.SUBMITTED) == []
    answers.update({"POST /upload": posted.text, "POST /api/entries": api.text})
    # No hash but the participant's own archive's (the receipt) reaches them.
    receipts = {e.archive_sha256 for e in web.queue.entries()}
    assert {h for text in answers.values() for h in HEX64.findall(text)} <= receipts


def test_the_reference_hash_brute_force_finds_nothing_in_what_a_participant_gets(scored_portal):
    web, eid = scored_portal
    records = [line.split(",")[0] for line in (AF2017 / "reference" / "REFERENCE.csv").read_text().split()]
    with web.queue.database.transaction() as db:
        db.execute("UPDATE entries SET published = ? WHERE id = ?", (time.time() - 1, eid))
    # The attack is real: on the organiser's document it gives the hidden labels back.
    organiser = show(web.site, web.queue, eid, organiser=True)
    assert brute_force({organiser["scorings"][0]["reference_sha256"]}, records) == \
        (AF2017 / "reference" / "REFERENCE.csv").read_text()
    token = web.vmjudge("owner", "add", "alice").stdout.strip().split()[-1]
    client = web.client()
    sign_in(client, token)
    given = {h for text in participant_answers(web, eid, client, token).values() for h in HEX64.findall(text)}
    given |= set(HEX64.findall(json.dumps(show(web.site, web.queue, eid))))
    assert brute_force(given, records) is None
    assert organiser["scorings"][0]["results_sha256"] not in "".join(given)


def test_what_an_owner_has_used_counts_the_exam_from_its_publish_time(queue_location, tmp_path):
    """The entry limit, the budget and the portal's pending limit answer participants too: an
    exam's end must not show in them before its publish time (a place given back, a budget's
    tenth moving, a pending limit no longer reached)."""
    (queue,) = hosts(queue_location, tmp_path, "h")
    eid = add(queue, tmp_path)
    judge(queue, eid)
    runs = {r.stage: r for r in queue.stage_runs(eid)}
    before_exam = runs["prep"].vm_seconds + runs["quiz"].vm_seconds
    used = queue.owner_usage("c", "alice", False)
    assert (used.scored, used.pending, used.waiting) == (0, 1, 1)
    assert used.vm_seconds == pytest.approx(before_exam)
    with queue.database.transaction() as db:  # the publish time has come
        db.execute("UPDATE entries SET published = ? WHERE id = ?", (time.time() - 1, eid))
    used = queue.owner_usage("c", "alice", False)
    assert (used.scored, used.pending, used.waiting) == (1, 0, 0)
    assert used.vm_seconds == pytest.approx(before_exam + runs["exam"].vm_seconds)


# #40: a contest's phase that keeps its results back until the organiser publishes it

def phase_pair(queue_location, tmp_path, feedback: str):
    """Entries of a contest's test phase (feedback `feedback`) judged alike up to the exam, then
    different in everything the exam could drive: its time and figures (in different tenths),
    its counts, its score; each exam's own publish time has come, the phase is not published."""
    from .phased import contest_dir
    directory = contest_dir(tmp_path)
    text = (directory / "challenge.toml").read_text().replace('feedback = "errors"', f'feedback = "{feedback}"')
    (directory / "challenge.toml").write_text(text)
    queue = Queue(queue_location)
    queue.add_challenge("contest", directory, "key")
    ids = []
    for owner, exam, counts, score in (
            ("owner-a", EXAM, COUNTS, 0.25),
            ("owner-b", {**EXAM, "stage_seconds": 3000.0}, {**COUNTS, "completed": 5, "failed": 3}, 0.95)):
        archive = tmp_path / f"{owner}-entry.zip"
        archive.write_bytes(owner.encode())
        eid = queue.add_entry("contest", owner, False, hashlib.sha256(owner.encode()).hexdigest(), archive.name,
                              archive, phase="test")
        judge(queue, eid, exam, {"score": score}, exam_counts=counts)
        ids.append(eid)
    with queue.database.transaction() as db:  # the exams' publish times have come; the phase's has not
        db.execute("UPDATE entries SET published = ?", (time.time() - 1,))
    return queue, ids


@pytest.mark.parametrize("feedback", ["errors", "none"])
def test_before_its_phase_is_published_two_entries_look_the_same_whatever_their_exams_did(
        queue_location, tmp_path, feedback):
    from vmjudge.reports.phase_view import PhaseViews
    queue, (a, b) = phase_pair(queue_location, tmp_path, feedback)
    views = PhaseViews.load(queue)
    docs, rows = {}, {}
    for eid in (a, b):
        entry = queue.entry(eid)
        doc = show(None, queue, eid, at=time.time())
        assert (doc["scores"], doc["exam"], doc["figures"], doc["scorings"], doc["feedback"]) == ({}, None, {}, [],
                                                                                                 feedback)
        assert "hardware" not in doc and "budget" not in doc
        docs[eid] = normalised(doc, entry)
        row = participant.entry_row(entry, time.time(), views.feedback(entry, time.time()))
        rows[eid] = json.dumps({**row, "id": "*", "archive_name": "*", "submitted_at": "*"}, sort_keys=True)
        assert row["score"] is None
    assert docs[a] == docs[b] and rows[a] == rows[b]
    assert not views.board_shown("contest", "test", time.time())
    # Published: the documents are the full reports, and differ as the exams did.
    queue.phases.publish("contest", "test", "olga")
    after = {eid: show(None, queue, eid, at=time.time()) for eid in (a, b)}
    assert [after[e]["scores"]["score"] for e in (a, b)] == [0.25, 0.95]
    assert (after[a]["figures"]["exam"]["time_tenths"], after[b]["figures"]["exam"]["time_tenths"]) == (4, 9)
    assert PhaseViews.load(queue).board_shown("contest", "test", time.time())
