"""The leaderboard through `vmjudge leaderboard` (no VMs): entries come in by the real
`submit` (and `submit --late`) and are scored with the queue's own API, as the score stage
leaves them. The HTML board is rendered by headless Chromium and read back from its DOM."""

from __future__ import annotations

import csv
import io
import json
import shutil
import sqlite3
import subprocess
import tarfile
from html.parser import HTMLParser
from pathlib import Path

import pytest

from vmjudge.queue.db import Queue
from vmjudge.reports import leaderboard as lb

from .cli import run_cli
from .test_score_container import CONTAINER
from .test_sockets import challenge

SCRIPT_OWNER = "<script>document.title='owned'</script>"


class Board:
    """A home with challenge "c" registered, entries submitted through the command line."""

    def __init__(self, tmp_path: Path):
        self.tmp = tmp_path
        self.home = tmp_path / "home"
        self.home.mkdir()
        (tmp_path / "c").mkdir()
        (tmp_path / "c" / "challenge.toml").write_text('name = "c"\n')
        self.queue = Queue(self.home / "queue.db")
        self.queue.add_challenge("c", tmp_path / "c", "key")
        self.count = 0

    def run(self, *args: str) -> subprocess.CompletedProcess:
        return run_cli(*args, home=self.home)

    def submit(self, owner: str, late: bool = False) -> int:
        self.count += 1
        path = self.tmp / f"e{self.count}-entry.tar.gz"
        with tarfile.open(path, "w:gz") as tar:
            for name, data in (("setup.sh", b"true\n"), ("next.sh", f"echo {self.count}\n".encode())):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        proc = self.run("submit", "c", str(path), "--owner", owner, *(["--late"] if late else []))
        assert proc.returncode == 0, proc.stderr
        return int(proc.stdout)

    def score(self, entry_id: int, scores: dict[str, float]) -> None:
        self.queue.claim_next(only=entry_id)
        run = self.queue.start_stage(entry_id, "score", 0)
        self.queue.finish_stage(run, "scored", "Scores", {}, outcome="scored", scores=scores)

    def scored(self, owner: str, score: float, late: bool = False, **others: float) -> int:
        entry_id = self.submit(owner, late)
        self.score(entry_id, {"score": score, **others})
        return entry_id

    def json(self, *flags: str) -> list[dict]:
        proc = self.run("leaderboard", "c", "--json", *flags)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)


@pytest.fixture
def board(tmp_path):
    return Board(tmp_path)


def test_each_owner_is_ranked_by_their_best_entry(board):
    a1 = board.scored("alice", 0.6, Se=0.1)
    a2 = board.scored("alice", 0.9, Se=0.2)
    board.scored("alice", 0.7, Se=0.3)
    b1 = board.scored("bob", 0.8, Se=0.4)
    rows = board.json()
    assert [(r["rank"], r["owner"], r["entry_id"], r["score"]) for r in rows] == [(1, "alice", a2, 0.9),
                                                                                  (2, "bob", b1, 0.8)]
    assert rows[0]["scores"] == {"score": 0.9, "Se": 0.2}  # the other fields of that same entry
    assert a1 not in {r["entry_id"] for r in rows}


def test_equal_scores_go_to_the_earlier_submission(board):
    # Entry ids follow submission order in practice; here the later id has the earlier time, so
    # that the test tells submission time from id. Within one second, the earlier id wins.
    carol, alice, dave, erin = (board.submit(o) for o in ("carol", "alice", "dave", "erin"))
    times = {carol: "2026-11-21T10:00:05Z", alice: "2026-11-21T10:00:01Z",
             dave: "2026-11-21T10:00:09Z", erin: "2026-11-21T10:00:09Z"}
    with sqlite3.connect(board.queue.database.path) as db:
        db.executemany("UPDATE entries SET submitted_at = ? WHERE id = ?", [(t, i) for i, t in times.items()])
    for entry_id in (erin, dave, alice, carol):
        board.score(entry_id, {"score": 0.75})
    assert [(r["rank"], r["owner"]) for r in board.json()] == [(1, "alice"), (2, "carol"), (3, "dave"), (4, "erin")]


def test_late_entries_have_their_own_board_and_never_reach_the_official_one(board):
    board.scored("alice", 0.5)
    late = board.scored("dave", 0.99, late=True)
    also_late = board.scored("alice", 0.95, late=True)
    assert [(r["owner"], r["score"]) for r in board.json()] == [("alice", 0.5)]
    assert [(r["owner"], r["entry_id"]) for r in board.json("--late")] == [("dave", late), ("alice", also_late)]
    text = board.run("leaderboard", "c", "--late").stdout
    assert text == ("c late leaderboard\n==================\nrank     score   entry  owner\n"
                    f"   1    0.9900 {late:7d}  dave\n   2    0.9500 {also_late:7d}  alice\n")


def test_csv_has_every_score_field_survives_awkward_owners_and_defuses_formulas(board, tmp_path):
    board.scored('smith, "jr"', 0.8, F1_N=0.9)
    board.scored("=cmd", 0.7, F1_A=0.1)
    out = tmp_path / "board.csv"
    proc = board.run("leaderboard", "c", "--csv", str(out))
    assert proc.returncode == 0 and proc.stdout == ""
    rows = list(csv.reader(out.open(newline="")))
    assert rows[0] == ["rank", "owner", "entry", "submitted_at", "score", "F1_N", "F1_A"]
    assert [(r[0], r[1], r[4], r[5], r[6]) for r in rows[1:]] == [("1", 'smith, "jr"', "0.8", "0.9", ""),
                                                                   ("2", "'=cmd", "0.7", "", "0.1")]


def test_only_one_output_may_be_chosen(board, tmp_path):
    proc = board.run("leaderboard", "c", "--json", "--html", str(tmp_path / "b.html"))
    assert proc.returncode == 1
    assert proc.stderr == "vmjudge: --json, --csv and --html each choose the output: give only one of them.\n"
    assert not (tmp_path / "b.html").exists()


def test_an_unwritable_board_file_is_one_sentence(board, tmp_path):
    proc = board.run("leaderboard", "c", "--html", str(tmp_path / "no-such-dir" / "b.html"))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"vmjudge: cannot write {tmp_path / 'no-such-dir' / 'b.html'} (")


def test_html_is_self_contained_and_escapes_every_value(board, tmp_path):
    board.scored(SCRIPT_OWNER, 0.9)
    board.scored("a&b <i>x</i>", 0.8, **{"<b>field</b>": 0.5})
    out = tmp_path / "board.html"
    assert board.run("leaderboard", "c", "--html", str(out)).returncode == 0
    page = out.read_text()
    assert "<script" not in page and "<i>" not in page and "<b>" not in page
    assert "&lt;script&gt;" in page and "a&amp;b &lt;i&gt;x&lt;/i&gt;" in page and "&lt;b&gt;field&lt;/b&gt;" in page
    for external in ("http:", "https:", "//", "src=", "href=", "@import", "url("):
        assert external not in page.replace("<!doctype html>", "")


# --- headless Chromium -----------------------------------------------------------------------------

class Rendered(HTMLParser):
    """What a browser shows of a board: the text of each body row's cells, and any element that
    would run code or fetch something."""

    ACTIVE = {"script", "iframe", "object", "embed", "img", "link", "base", "form"}

    def __init__(self, dom: str):
        super().__init__()
        self.rows: list[list[str]] = []
        self.active: list[str] = []
        self.title = ""
        self._in_body = self._in_cell = self._in_title = False
        self.feed(dom)

    def handle_starttag(self, tag, attrs):
        if tag in self.ACTIVE:
            self.active.append(tag)
        if tag == "tbody":
            self._in_body = True
        elif tag == "tr" and self._in_body:
            self.rows.append([])
        elif tag == "td" and self._in_body:
            self.rows[-1].append("")
            self._in_cell = True
        elif tag == "title":
            self._in_title = True

    def handle_endtag(self, tag):
        if tag == "tbody":
            self._in_body = False
        elif tag == "td":
            self._in_cell = False
        elif tag == "title":
            self._in_title = False

    def handle_data(self, data):
        if self._in_cell:
            self.rows[-1][-1] += data
        if self._in_title:
            self.title += data


def render(page: Path, profile: Path) -> Rendered:
    """The DOM as headless Chromium built it from `page` (any script in it would have run)."""
    chromium = shutil.which("chromium")
    assert chromium, "chromium is not installed: run `make setup` (vmjudge/host/setup-host --tools installs it)."
    proc = subprocess.run([chromium, "--headless", "--disable-gpu", "--no-sandbox", f"--user-data-dir={profile}",
                           "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "<table" in proc.stdout, proc.stderr[-2000:]
    return Rendered(proc.stdout)


def test_chromium_shows_the_html_board_row_by_row(board, tmp_path):
    alice = board.scored("alice", 0.625, F1_N=0.5)
    board.scored("alice", 0.5, F1_N=0.9)
    hacker = board.scored(SCRIPT_OWNER, 0.875)
    bob = board.scored("bob & co", 0.625, F1_N=0.25)
    board.scored("late-larry", 0.99, late=True)
    out = tmp_path / "board.html"
    assert board.run("leaderboard", "c", "--html", str(out)).returncode == 0
    shown = render(out, tmp_path / "profile")
    assert shown.active == [] and shown.title == "c leaderboard"
    assert [row[:5] for row in shown.rows] == [
        ["1", SCRIPT_OWNER, "0.8750", "", str(hacker)],
        ["2", "alice", "0.6250", "0.5000", str(alice)],
        ["3", "bob & co", "0.6250", "0.2500", str(bob)],
    ]
    assert board.run("leaderboard", "c", "--late", "--html", str(out)).returncode == 0
    late = render(out, tmp_path / "profile")
    assert late.title == "c late leaderboard" and [row[:3] for row in late.rows] == [["1", "late-larry", "0.9900"]]


def test_chromium_check_catches_an_unescaped_owner(tmp_path):
    """The rendering check has teeth: a board that pasted an owner's name unescaped fails it."""
    rows = [lb.Row(rank=1, owner="OWNER", entry_id=1, score=0.5, submitted_at="t", scores={"score": 0.5})]
    out = tmp_path / "broken.html"
    out.write_text(lb.as_html("c", rows).replace("OWNER", SCRIPT_OWNER))
    shown = render(out, tmp_path / "profile")
    assert shown.active == ["script"] and shown.rows[0][1] != SCRIPT_OWNER


def test_the_boards_content_security_policy_stops_a_script_that_got_in(tmp_path):
    """Defence in depth behind the escaping: were an owner's name ever pasted unescaped, the
    page's policy keeps Chromium from running it (the same page without the policy runs it)."""
    policy = "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; style-src 'unsafe-inline'\">"
    rows = [lb.Row(rank=1, owner="OWNER", entry_id=1, score=0.5, submitted_at="t", scores={"score": 0.5})]
    page = lb.as_html("c", rows)
    assert page.count(policy) == 1 and page.index(policy) < page.index("<title>")
    injected = page.replace("OWNER", "<script>document.title = 'script ran'</script>")
    (tmp_path / "with.html").write_text(injected)
    (tmp_path / "without.html").write_text(injected.replace(policy, ""))
    assert render(tmp_path / "with.html", tmp_path / "profile").title == "c leaderboard"
    assert render(tmp_path / "without.html", tmp_path / "profile").title == "script ran"


def test_a_challenge_whose_lower_score_is_better_ranks_the_lowest_first(board):
    """[score] order = "lower" (an evaluation's distance or error): each owner's lowest entry counts,
    the lowest ranks first, a tie still goes to the earlier submission, and the chart's line is the
    lowest so far."""
    a1, a2 = board.scored("alice", 4.5), board.scored("alice", 2.25)
    board.scored("alice", 3.0)
    b1 = board.scored("bob", 7.0)
    c1 = board.scored("carol", 2.25)
    challenge(board.tmp / "c", CONTAINER.replace('name = "gc"', 'name = "c"').replace(  # the board reads it
        'metric = "aggregates.dice.mean"', 'metric = "aggregates.hd95.mean"\norder = "lower"'))
    rows = board.json()
    assert [(r["rank"], r["owner"], r["entry_id"], r["score"]) for r in rows] == [
        (1, "alice", a2, 2.25), (2, "carol", c1, 2.25), (3, "bob", b1, 7.0)]
    assert a1 not in {r["entry_id"] for r in rows}
    drawn = lb.history(board.queue, "c", lower_first=True)
    assert [best for _t, best in drawn["alice"]] == [4.5, 2.25, 2.25]
    text = board.run("leaderboard", "c").stdout
    assert text.index("carol") < text.index("bob")
    assert [r.owner for r in lb.leaderboard(board.queue, "c")] == ["bob", "alice", "carol"]  # without the order
