"""#38: the report page as structure (no VM; a real queue, the real portal through starlette's
TestClient, the page read as a tree): each stage a step with its status, the output a participant
may see in collapsible blocks, each figure a bar of its limit with the words beside it (the
exam's in tenths only), the scores as a table with the scorer's version, the hardware, and the
plain text beside it. Entries are judged through the queue's own calls."""

from __future__ import annotations

import json
import re
import time
import xml.etree.ElementTree as ET

import pytest

from vmjudge.queue.rows import Scoring
from vmjudge.reasons import REASONS, explanation, find
from vmjudge.reports import participant
from vmjudge.reports.report import show
from vmjudge.stages.context import DRYRUN_MESSAGE
from vmjudge.web.chart import chart

from .html_tree import parse
from .test_figures import EXAM, MIB, PREP, QUIZ
from .web_home import WebHome, sign_in

HARDWARE = {"host": "judge-1", "cpu": "Test CPU @ 3 GHz", "vcpus": 2, "memory_mib": 2048, "pid": 4242}
SETUP_FAILED = ("setup.sh failed (exit status 1). Entry not scored.\n--- setup.sh output ---\n"
                "Traceback (most recent call last):\nValueError: <no model>")


def stage(queue, eid, name, status, message, nxt=None, **kw):
    queue.claim_next(only=eid)
    run = queue.start_stage(eid, name, 0)
    queue.finish_stage(run, status, message, {"stage": name, "hardware": HARDWARE}, next_stage=nxt, **kw)


def published(queue, eid):
    """The exam's publish time has come (it is set in the future when the exam ends)."""
    with queue.database.transaction() as db:
        db.execute("UPDATE entries SET published = ? WHERE id = ?", (time.time() - 1, eid))


def judged(web, kind: str, owner: str = "alice", score: float = 0.75, late: bool = False) -> int:
    eid = web.queue.add_entry("big", owner, late, "a" * 64, f"{kind}-entry.tar.gz", web.tar(f"{kind}.tar.gz"))
    q = web.queue
    if kind == "failed":
        stage(q, eid, "prep", "failed", SETUP_FAILED, reason="setup-error", outcome="failed", figures=PREP)
        return eid
    stage(q, eid, "prep", "passed", "setup.sh completed.\n--- setup.sh output ---\ninstalled", "quiz", figures=PREP)
    if kind == "dry-run":
        stage(q, eid, "quiz", "dry-run", DRYRUN_MESSAGE, outcome="dry-run", figures=QUIZ)
        return eid
    stage(q, eid, "quiz", "passed", "Every training record reproduced.", "exam", figures=QUIZ)
    counts = {"records": 8, "completed": 8, "failed": 0, "timed_out": 0}
    stage(q, eid, "exam", "passed", "8 test records: 8 completed.", "score", figures=EXAM, exam=counts)
    if kind == "examined":
        return eid
    scores = {"score": score, "F1_N": 0.8, "F1_A": None}
    stage(q, eid, "score", "scored", f"score {score}", outcome="scored", scores=scores,
          scoring=Scoring(eid, "official", "dice", "dice/2.1", "e" * 64, "d" * 64, scores))
    published(q, eid)
    return eid


@pytest.fixture
def alice(tmp_path):
    web = WebHome(tmp_path)
    client = web.client()
    web.token = web.owners.add("alice")
    assert sign_in(client, web.token).status_code == 303
    return web, client


def steps(page) -> dict[str, str]:
    return {li.attrs["id"]: li.attrs["data-status"] for li in page.one("ol", id="steps").all("li", cls="step")}


def meters(node) -> list[tuple[str, float, float, str]]:
    """Each bar: its label, value and limit, and the words beside it."""
    return [(bar.one(cls="bar-label").text, float(bar.one("meter").attrs["value"]),
             float(bar.one("meter").attrs["max"]), bar.one(cls="bar-words").text) for bar in node.all(cls="bar")]


def test_a_scored_entry_shows_four_passed_steps_its_bars_its_scores_and_where_it_ran(alice):
    web, client = alice
    eid = judged(web, "scored")
    answer = client.get(f"/entries/{eid}")
    page = parse(answer.text)
    assert answer.status_code == 200
    assert steps(page) == dict.fromkeys(("step-prep", "step-quiz", "step-exam", "step-score"), "passed")
    assert page.one(id="verdict").text == "Entry scored."
    prep = page.one("li", id="step-prep")
    assert prep.one(cls="badge").text == "Passed" and prep.one(cls="message").text == "setup.sh completed."
    excerpt = prep.one("details")
    assert excerpt.one("summary").text == "setup.sh output" and excerpt.one("pre").text == "installed"
    assert meters(prep) == [("setup.sh", 41.234, 300.0, "41.2 s of 300.0 s"),
                            ("Peak memory", 700 * MIB, 1800 * MIB, "700.0 MiB of 1.8 GiB"),
                            ("Home disk", 120 * MIB, 1024 * MIB, "120.0 MiB of 1.0 GiB used")]
    quiz = page.one("li", id="step-quiz")
    assert [m[:3] for m in meters(quiz)][:2] == [("The quiz", 80.123, 4100.0), ("Slowest record (a106)", 8.0, 40.0)]
    assert len(quiz.one("details", cls="records").all("tr", data_training=None)) == 7
    # The exam: its two tenths as bars out of ten, nothing finer anywhere on the page.
    exam = page.one("li", id="step-exam")
    assert meters(exam) == [("Time", 4.0, 10.0, "4/10 of the 1 h cap"),
                            ("Peak memory", 5.0, 10.0, "5/10 of the VM's 2.0 GiB")]
    assert not exam.all(data_training=None) and not exam.all("details")
    for finer in ("1234", "7.123", "1.456", "b201", "b202", "900.0 MiB"):
        assert finer not in answer.text, finer
    for label, value, limit, _ in meters(page):
        assert 0 <= value <= limit, label
    table = page.one("table", id="scores")
    assert "dice, version dice/2.1" in table.one("caption").text
    assert [(r.one("th").text, r.one("td").text) for r in table.one("tbody").all("tr")] == \
        [("score", "0.7500"), ("F1_N", "0.8000"), ("F1_A", "undefined (0/0)")]
    hardware = page.one("dl", id="hardware")
    assert [(t.text, d.text) for t, d in zip(hardware.all("dt"), hardware.all("dd"), strict=True)] == [
        ("Host", "judge-1"), ("CPU", "Test CPU @ 3 GHz"), ("vCPUs", "2"), ("Memory (MiB)", "2048")]  # no pid
    assert page.one("a", id="as-text").attrs["href"] == f"/entries/{eid}?format=text"


def test_a_failed_entry_shows_the_failed_step_its_reason_and_output_and_the_rest_not_run(alice):
    web, client = alice
    eid = judged(web, "failed")
    page = parse(client.get(f"/entries/{eid}").text)
    assert steps(page) == {"step-prep": "failed", "step-quiz": "not-run", "step-exam": "not-run",
                           "step-score": "not-run"}
    prep = page.one("li", id="step-prep")
    assert prep.one(cls="badge").text == "Failed" and prep.one(cls="reason").text == "Reason: setup-error"
    assert prep.one(cls="message").text == "setup.sh failed (exit status 1). Entry not scored."
    assert prep.one("details").one("pre").text == "Traceback (most recent call last): ValueError: <no model>"
    assert [m[0] for m in meters(prep)] == ["setup.sh", "Peak memory", "Home disk"]
    assert page.one("li", id="step-quiz").one(cls="badge").text == "Not run" and not page.all("table", id="scores")
    assert page.one(id="verdict").text == "Entry not scored (prep: setup-error)."


def test_a_failed_entrys_reason_links_to_its_row_and_its_text_report_explains_it(alice):
    """Every verdict explained (vmjudge/reasons): the report's reason is a link to its row on /reasons,
    which lists every reason the judge records, and the text report ends with the row's words."""
    web, client = alice
    eid = judged(web, "failed")
    page = parse(client.get(f"/entries/{eid}").text)
    assert page.one("li", id="step-prep").one(cls="reason").one("a").attrs["href"] == "/reasons#setup-error"
    listed = parse(client.get("/reasons").text)
    assert [r.attrs["id"] for r in listed.all("tr", id=None)] == [r.code for r in REASONS]
    row = find("setup-error")
    assert row is not None and row.remedy in listed.one("tr", id="setup-error").text
    text = client.get(f"/entries/{eid}?format=text").text
    assert text.rstrip().endswith(f"Entry not scored (prep: setup-error).\n{explanation('setup-error')}")
    assert parse(web.client().get("/reasons").text).one("tr", id="vm-restore")  # the same page signed out


def test_a_dry_run_shows_its_quiz_as_the_dry_run_and_the_exam_not_run(alice):
    web, client = alice
    eid = judged(web, "dry-run")
    page = parse(client.get(f"/entries/{eid}").text)
    assert steps(page) == {"step-prep": "passed", "step-quiz": "dry-run", "step-exam": "not-run",
                           "step-score": "not-run"}
    quiz = page.one("li", id="step-quiz")
    assert quiz.one(cls="badge").text == "Dry run" and quiz.one(cls="message").text == DRYRUN_MESSAGE
    assert [m[0] for m in meters(quiz)][:2] == ["The quiz", "Slowest record (a106)"]
    assert not page.one("li", id="step-exam").all(cls="bar") and page.one(id="verdict").text == "Dry run completed."


def test_an_entry_being_examined_shows_its_exam_running_and_nothing_of_it(alice):
    web, client = alice
    eid = judged(web, "examined")
    text = client.get(f"/entries/{eid}").text
    page = parse(text)
    assert steps(page) == {"step-prep": "passed", "step-quiz": "passed", "step-exam": "running",
                           "step-score": "waiting"}
    assert not page.one("li", id="step-exam").all(cls="bar") and "8 completed" not in text
    assert "/10" not in text and not page.all("table", id="scores")


def test_the_plain_text_stays_and_the_api_is_unchanged(alice):
    web, client = alice
    eid = judged(web, "scored")
    text = client.get(f"/entries/{eid}?format=text")
    assert text.status_code == 200 and text.headers["content-type"].startswith("text/plain")
    assert text.text == show(web.site, web.queue, eid)["report"]
    api = client.get(f"/api/entries/{eid}", headers={"Authorization": f"Bearer {web.token}"}).json()
    assert api == json.loads(json.dumps(show(web.site, web.queue, eid)))
    assert "steps" not in api and set(api) <= set(participant.ENTRY)


SVG = "{http://www.w3.org/2000/svg}"


def board_chart(text: str) -> ET.Element:
    """The board page's chart, parsed as the XML it must be."""
    found = re.search(r'<figure class="chart" id="chart">\s*(<svg.*?</svg>)', text, re.S)
    assert found, "no chart on the board"
    return ET.fromstring(found.group(1))


def test_the_board_marks_my_row_and_charts_each_owners_best_a_point_per_scored_entry(alice):
    web, client = alice
    judged_at = {}
    for i, (owner, score) in enumerate([("alice", 0.5), ("bob", 0.6), ("alice", 0.4), ("alice", 0.9), ("bob", 0.7)]):
        judged_at[judged(web, "scored", owner, score)] = f"2026-01-0{i + 1}T12:00:00Z"
    judged(web, "failed", "carol")  # not scored: no point
    judged(web, "scored", "carol", 0.99, late=True)  # the late board's
    judged(web, "examined", "dave")  # being examined: not counted yet, nor drawn
    with web.queue.database.transaction() as db:
        for eid, t in judged_at.items():
            db.execute("UPDATE entries SET submitted_at = ? WHERE id = ?", (t, eid))
    text = client.get("/leaderboards/big").text
    page = parse(text)
    mine = page.one("tr", id="my-row")
    assert mine.attrs["class"] == "me" and mine.one("td", cls="owner").text == "alice" and "(you)" in mine.text
    assert [r.one("td", cls="owner").text for r in page.one("table", id="leaderboard").one("tbody").all("tr")] == \
        ["alice", "bob"]
    svg = board_chart(text)
    assert svg.get("role") == "img" and svg.find(f"{SVG}title").text.startswith("Each owner's best score")
    series = {g.get("data-owner"): g for g in svg.iter(f"{SVG}g")}
    assert set(series) == {"alice", "bob"} and "mine" in series["alice"].get("class")
    points = {owner: [c for c in g.iter(f"{SVG}circle") if "point" in c.get("class")] for owner, g in series.items()}
    assert {owner: len(p) for owner, p in points.items()} == {"alice": 3, "bob": 2}  # one per scored entry
    assert len(list(svg.iter(f"{SVG}circle"))) == 5
    alice_y = [float(c.get("cy")) for c in points["alice"]]
    assert alice_y[0] == alice_y[1] > alice_y[2]  # 0.4 did not raise her best of 0.5; 0.9 did (up is less y)
    assert [float(c.get("cx")) for c in points["alice"]] == sorted(float(c.get("cx")) for c in points["alice"])
    assert [c.find(f"{SVG}title").text for c in points["bob"]] == [
        "bob: best 0.6000 after the entry of 2026-01-02T12:00:00Z", "bob: best 0.7000 after the entry of "
        "2026-01-05T12:00:00Z"]
    table = page.one("table", id="chart-points").one("tbody").all("tr")  # the same points, for a screen reader
    assert [[td.text for td in tr.all("td")] for tr in table if tr.attrs.get("class") == "me"] == [
        ["alice", "2026-01-01T12:00:00Z", "0.5000"], ["alice", "2026-01-03T12:00:00Z", "0.5000"],
        ["alice", "2026-01-04T12:00:00Z", "0.9000"]] and len(table) == 5
    late = client.get("/leaderboards/big?late=1").text
    assert len(list(board_chart(late).iter(f"{SVG}circle"))) == 1 and "my-row" not in late
    assert 'id="chart"' not in client.get("/leaderboards/adm").text  # no scored entry: no chart


def test_my_entries_show_a_status_badge_and_the_score(alice):
    web, client = alice
    ids = {kind: judged(web, kind) for kind in ("scored", "failed", "dry-run", "examined")}
    queued = web.queue.add_entry("big", "alice", False, "a" * 64, "q-entry.tar.gz", web.tar("q.tar.gz"))
    rows = {tr.attrs["id"]: tr for tr in parse(client.get("/entries").text).one("table", id="entries").all("tr")
            if "id" in tr.attrs}
    badges = {eid: rows[f"entry-{eid}"].one("td", cls="state").one(cls="badge") for eid in [*ids.values(), queued]}
    assert {eid: (b.attrs["class"], b.text) for eid, b in badges.items()} == {
        ids["scored"]: ("badge badge-scored", "scored"), ids["failed"]: ("badge badge-failed", "failed"),
        ids["dry-run"]: ("badge badge-dry-run", "dry run"),
        ids["examined"]: ("badge badge-running", "running (exam)"), queued: ("badge badge-queued", "queued (prep)")}
    assert rows[f"entry-{ids['scored']}"].one("td", cls="score").text == "0.7500"
    assert rows[f"entry-{ids['examined']}"].one("td", cls="score").text == ""  # its score is not published yet
    script = client.get("/static/entries.js").text  # the refresh draws the same badge from /entries.json
    assert 'span.className = "badge badge-" + kind' in script and 'e.state === "done" && e.outcome' in script


def test_the_new_pages_load_nothing_from_elsewhere_and_keep_the_csp(alice):
    web, client = alice
    eid = judged(web, "scored")
    for url in (f"/entries/{eid}", "/entries", "/leaderboards/big"):
        answer = client.get(url)
        assert answer.headers["content-security-policy"].startswith("default-src 'none'; script-src 'self';")
        page = parse(answer.text)
        links = [n.attrs.get(a) or "" for n in page.walk() for a in ("src", "href") if a in n.attrs]
        assert links and all(link.startswith(("/", "?")) for link in links), (url, links)
        assert not page.all(style=None) and not page.all("style")  # no inline style for the CSP to refuse
        assert all("src" in s.attrs for s in page.all("script"))  # no inline script either


def test_the_chart_puts_the_best_score_up_whichever_way_the_board_ranks():
    """On a board whose lower score ranks first ([score] order = "lower"), the lowest is drawn highest."""
    history = [{"owner": "a", "points": [{"submitted_at": "2026-12-05T10:00:00Z", "best": 4.0},
                                         {"submitted_at": "2026-12-05T11:00:00Z", "best": 2.0}]}]
    for lower_first, best_drawn_higher in ((False, 4.0), (True, 2.0)):
        drawn = chart(history, ["a"], "a", lower_first)
        assert drawn is not None
        ys = {p.best: p.y for p in drawn.series[0].points}
        assert min(ys, key=ys.get) == best_drawn_higher  # a smaller y is higher up in SVG
