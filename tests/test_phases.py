"""#40: a contest run in phases, on SQLite and on a real PostgreSQL server, without VMs.

Entries are admitted and refused by the real commands (`vmjudge submit`, `carry`, `promote`,
`publish`, `leaderboard`, `entries`, `usage`, `rescore`, `phases`), and judged through the
queue's own calls: prep and quiz recorded, the exam's answers archived as stage 3 archives
them, and stage 4 run for real (supervisor/evaluate.py), so each phase's entries are scored
against that phase's own reference. Every refusal is checked by its sentence.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from vmjudge.config import ImageRecipe, load_challenge, load_site
from vmjudge.config.phase import utc
from vmjudge.queue.admit import admit
from vmjudge.queue.carry import carry
from vmjudge.queue.db import Queue
from vmjudge.queue.publish import STEPS, tenths
from vmjudge.queue.results import encode, put
from vmjudge.reports import participant
from vmjudge.reports.leaderboard import leaderboard
from vmjudge.reports.phase_view import PhaseViews
from vmjudge.reports.report import show
from vmjudge.stages.context import StageOutcome
from vmjudge.supervisor.attempts import Recorder
from vmjudge.supervisor.evaluate import conclude, run_stage
from vmjudge.supervisor.slots import Slot

from .cli import run_cli
from .hostile.cases import tar_of
from .phased import QUICK, SETS, accuracy, contest_dir, contest_toml, write_training
from .test_figures import EXAM, PREP, QUIZ
from .test_image_transfer import fake_image
from .test_rescore import NO_VM_ENV

DAY = 86400


def answered(phase: str, wrong: int = 0) -> dict[str, str]:
    """What the entry answers in `phase`: each record's number, but 0 for the first `wrong`."""
    return {r: ("0" if i < wrong else str(number)) for i, (r, (number, _)) in enumerate(SETS[phase].items())}


def expected(phase: str, wrong: int = 0) -> float:
    return accuracy(phase, answered(phase, wrong))


def at(seconds: float) -> str:
    """A TOML offset date-time `seconds` from now."""
    return utc(time.time() + seconds)


@dataclass
class Contest:
    root: Path
    home: Path
    directory: Path
    queue: Queue
    archives: list[Path] = field(default_factory=list)

    @property
    def site(self):
        return load_site(self.home)

    def vmjudge(self, *args: str, ok: bool = True):
        proc = run_cli(*args, home=self.home, env=NO_VM_ENV)
        assert (proc.returncode == 0) == ok, f"vmjudge {' '.join(args)}: {proc.returncode}\n{proc.stdout}{proc.stderr}"
        return proc

    def refused(self, *args: str) -> str:
        """The one sentence a refused command prints (exit 1, nothing else)."""
        proc = self.vmjudge(*args, ok=False)
        assert proc.returncode == 1 and proc.stdout == "" and proc.stderr.startswith("vmjudge: "), proc.stderr
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
        return proc.stderr[len("vmjudge: "):].rstrip("\n")

    def archive(self, owner: str, marker: str = "") -> Path:
        """The corpus's good entry (it answers each record with the number in its file), made
        distinct by `marker` so that each archive has bytes of its own."""
        path = self.root / f"{owner}{marker}{len(self.archives)}-entry.tar.gz"
        tar_of({"AUTHORS.txt": f"{owner} {marker} {len(self.archives)}".encode()}, path)
        self.archives.append(path)
        return path

    def submit(self, owner: str, *args: str) -> int:
        """What `vmjudge submit contest ARCHIVE --owner OWNER [--late] [--phase P]` does, in this
        process (the commands' own path is taken by the refusals, through the command line)."""
        late, phase = "--late" in args, args[args.index("--phase") + 1] if "--phase" in args else None
        return admit(self.site, self.queue, "contest", load_challenge(self.directory), self.archive(owner), owner,
                     late, phase=phase).entry_id

    def carry(self, entry_id: int, phase: str) -> int:
        """What `vmjudge carry contest ENTRY_ID --phase P` does, in this process."""
        return carry(self.queue, "contest", load_challenge(self.directory), phase, entry_id).entry_id

    def judge(self, entry_id: int, wrong: int = 0, fail: bool = False, examined: bool = False) -> None:
        """Take the entry through the four stages: prep and quiz pass (or prep fails), the exam
        answers each record of the entry's phase with its number (the first `wrong` records
        with 0), and stage 4 scores for real; then its exam's publish time has come, unless
        `examined` (participants then still see it being examined)."""
        queue = self.queue
        entry = queue.entry(entry_id)
        for stage, figures, nxt in (("prep", PREP, "quiz"), ("quiz", QUIZ, "exam")):
            queue.claim_next(only=entry_id)
            run = queue.start_stage(entry_id, stage, 0)
            if fail:
                queue.finish_stage(run, "failed", "setup.sh failed (exit status 1).", {"stage": stage},
                                   reason="setup-error", outcome="failed", figures=figures)
                return
            queue.finish_stage(run, "passed", f"{stage} passed", {"stage": stage}, next_stage=nxt, figures=figures)
        queue.claim_next(only=entry_id)
        run = queue.start_stage(entry_id, "exam", 0)
        records = SETS[entry.phase]
        answers = answered(entry.phase, wrong)
        digest = put(self.site.home, encode(tuple(records), dict.fromkeys(records, "ok"), "answer-lines",
                                            answers=answers))
        counts = {"records": len(records), "completed": len(records), "failed": 0, "timed_out": 0}
        conclude(queue, self.site, run, StageOutcome(
            "passed", f"{len(records)} test records: {len(records)} completed, 0 failed, 0 timed out.", exam=counts,
            manifest={"stage": "exam", "results_sha256": digest}, results_sha256=digest, figures=EXAM),
            Recorder(None))
        run_stage(queue, self.site, queue.claim_next(only=entry_id), Slot(0))  # the real stage 4
        assert queue.entry(entry_id).outcome == "scored"
        if not examined:
            self.exams_published()

    def exams_published(self) -> None:
        """Each entry's exam publish time (#30's, a tenth of the exam's cap after it started)
        has come: what is left hidden is the phase's doing alone."""
        with self.queue.database.transaction() as db:
            db.execute("UPDATE entries SET published = ? WHERE published IS NOT NULL", (time.time() - 1,))


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request, tmp_path):
    """Where the contest's queue lives: the home's SQLite file, or a fresh PostgreSQL database."""
    home = tmp_path / "home"
    home.mkdir()
    if request.param == "postgresql":
        (home / "site.toml").write_text(f'[queue]\nurl = "{request.getfixturevalue("pg_url")}"\n')
    return home


def make_contest(tmp_path: Path, home: Path, **windows: str) -> Contest:
    directory = contest_dir(tmp_path, **windows)
    site = load_site(home)
    site.layout.ensure()
    queue = Queue(site.queue.url or site.layout.queue_db, host=site.queue.host)
    queue.add_challenge("contest", directory, "key")
    return Contest(tmp_path, home, directory, queue)


@pytest.fixture
def contest(tmp_path, backend) -> Contest:
    return make_contest(tmp_path, backend)


def test_a_contest_end_to_end_with_every_refusal_on_the_way(contest):
    c = contest
    a1, b1, c1 = c.submit("alice"), c.submit("bob"), c.submit("carol")
    assert [c.queue.entry(e).phase for e in (a1, b1, c1)] == ["sanity"] * 3  # the one phase taking uploads
    # Uploads to a phase that takes carried entries only are refused before anything is stored.
    assert c.refused("submit", "contest", str(c.archive("alice")), "--owner", "alice", "--phase", "validation") == (
        "phase validation of contest takes no uploads: its entries are carried from phase sanity (`vmjudge carry "
        "contest --phase validation ENTRY_ID`, or \"Choose for phase validation\" on the entry's page).")
    # Not passed yet: still being judged.
    assert c.refused("carry", "contest", str(a1), "--phase", "validation") == (
        f"entry {a1} is still being judged in phase sanity of contest: carry it into phase validation once it has "
        "passed.")
    c.judge(a1)
    c.judge(b1, wrong=1)
    c.judge(c1, fail=True)
    assert c.refused("carry", "contest", str(c1), "--phase", "validation") == (
        f"entry {c1} did not pass phase sanity of contest: only an entry that passed it can be carried into phase "
        "validation.")
    # Scored against the sanity phase's own reference: s1 = 1, s2 = 2.
    assert c.queue.entry(a1).scores["score"] == 1.0 and c.queue.entry(b1).scores["score"] == 0.5
    a2 = int(c.vmjudge("carry", "contest", str(a1), "--phase", "validation").stdout)  # the command's own path
    b2 = c.carry(b1, "validation")
    entry = c.queue.entry(a2)
    source = c.queue.entry(a1)
    assert (entry.phase, entry.carried_from, entry.owner, entry.state, entry.stage) == \
        ("validation", a1, "alice", "queued", "prep")
    assert (entry.archive_sha256, entry.archive_path) == (source.archive_sha256, source.archive_path)
    assert c.refused("carry", "contest", str(a1), "--phase", "validation") == (
        f"entry {a1} was carried into phase validation already, as entry {a2}: an entry is carried into a phase "
        "once.")
    c.judge(a2, wrong=2)  # v1, v2 wrong, v3 right, v4's reference is 0: 1/4
    c.judge(b2)  # 3/4
    assert (c.queue.entry(a2).scores["score"], c.queue.entry(b2).scores["score"]) == (0.25, 0.75)
    # A carried entry of the wrong phase, and an owner not promoted.
    assert c.refused("carry", "contest", str(b1), "--phase", "test") == (
        "bob was not promoted to phase test of contest: only the owners the organisers promoted from phase "
        "validation may enter it.")
    assert c.vmjudge("promote", "contest", "--phase", "test", "--top", "1", "--by", "olga").stdout == (
        "promoted bob into phase test (place 1 of validation), top 1 of validation\n")
    assert c.refused("carry", "contest", str(b1), "--phase", "test") == (
        f"entry {b1} is an entry of phase sanity, and phase test of contest takes entries carried from phase "
        "validation.")
    assert c.refused("carry", "contest", str(a2), "--phase", "test") == (
        "alice was not promoted to phase test of contest: only the owners the organisers promoted from phase "
        "validation may enter it.")
    b3 = c.carry(b2, "test")
    assert c.refused("carry", "contest", str(b2), "--phase", "test") == (
        f"entry {b2} was carried into phase test already, as entry {b3}: an entry is carried into a phase once.")
    c.judge(b3, wrong=3)
    score = expected("test", 3)
    assert c.queue.entry(b3).scores["score"] == score == 4 / 8
    # The test phase's results stay hidden from participants until published.
    assert c.refused("leaderboard", "contest", "--phase", "test") == (
        "The board of phase test of contest is hidden until the organisers publish the phase's results "
        "(`vmjudge publish contest --phase test` publishes it; --organiser shows it to you now).")
    organiser = json.loads(c.vmjudge("leaderboard", "contest", "--phase", "test", "--json", "--organiser").stdout)
    assert [(r["owner"], r["entry_id"], r["score"]) for r in organiser] == [("bob", b3, score)]
    doc = json.loads(c.vmjudge("show", str(b3), "--json").stdout)
    assert (doc["state"], doc["outcome"], doc["scores"], doc["exam"], doc["figures"], doc["scorings"]) == \
        ("done", "scored", {}, None, {}, [])
    assert (doc["phase"], doc["carried_from"], doc["feedback"]) == ("test", b2, "errors")
    assert "0.5" not in json.dumps(doc) and "hardware" not in doc
    assert doc["report"].endswith("Entry scored; its score is shown once phase test is published.\n")
    assert c.vmjudge("publish", "contest", "--phase", "test", "--by", "olga").stdout.startswith(
        "published phase test of contest at ")
    assert c.refused("publish", "contest", "--phase", "test").startswith("phase test of contest was published "
                                                                         "already, at ")
    doc = json.loads(c.vmjudge("show", str(b3), "--json").stdout)
    assert (doc["scores"]["score"], doc["exam"]["records"], doc["feedback"]) == (score, 8, "full")
    assert set(doc["figures"]) == {"prep", "quiz", "exam"}
    board = json.loads(c.vmjudge("leaderboard", "contest", "--phase", "test", "--json").stdout)
    assert [(r["owner"], r["score"]) for r in board] == [("bob", score)]
    # The other boards are each phase's own.
    assert [r["owner"] for r in json.loads(c.vmjudge("leaderboard", "contest", "--phase", "validation",
                                                     "--json").stdout)] == ["bob", "alice"]
    assert [r["owner"] for r in json.loads(c.vmjudge("leaderboard", "contest", "--phase", "sanity",
                                                     "--json").stdout)] == ["alice", "bob"]



def write_windows(c: Contest, **windows: str) -> None:
    """The organiser moves the phases' dates: challenge.toml is read again by every command."""
    (c.directory / "challenge.toml").write_text(contest_toml(**windows))


def test_outside_its_window_a_phase_refuses_and_late_entries_wait_for_its_close(tmp_path, backend):
    sanity_closes = at(DAY)
    c = make_contest(tmp_path, backend, sanity=f"closes = {sanity_closes}")
    a1 = c.submit("alice")
    c.judge(a1)
    assert c.refused("submit", "contest", str(c.archive("alice")), "--owner", "alice", "--late") == (
        "no phase of contest that takes uploads has closed yet, and late entries are taken once a phase has "
        "closed: submit without --late.")
    assert c.refused("submit", "contest", str(c.archive("alice")), "--owner", "alice", "--phase", "sanity",
                     "--late") == (f"phase sanity of contest is open until {sanity_closes}: late entries to it are "
                                   "taken once it has closed; submit without --late.")
    # The organiser closes sanity and sets validation's opening a day ahead.
    sanity_opens, closed, opens = at(-2 * DAY), at(-DAY), at(DAY)
    write_windows(c, sanity=f"opens = {sanity_opens}\ncloses = {closed}", validation=f"opens = {opens}")
    assert c.refused("submit", "contest", str(c.archive("bob")), "--owner", "bob") == (
        f"no phase of contest takes uploads now (sanity from {sanity_opens} until {closed}): submit while one is "
        "open.")
    assert c.refused("submit", "contest", str(c.archive("bob")), "--owner", "bob", "--phase", "sanity") == (
        f"phase sanity of contest closed at {closed}: it takes no more entries (a late entry goes on its late "
        "board: submit it as late).")
    assert c.refused("carry", "contest", str(a1), "--phase", "validation") == (
        f"phase validation of contest opens at {opens}: it takes no entry before then.")
    late = c.submit("bob", "--late")  # the last phase that closed: sanity, on its late board
    assert (c.queue.entry(late).phase, c.queue.entry(late).late) == ("sanity", True)
    assert c.refused("submit", "contest", str(c.archive("bob")), "--owner", "bob", "--phase", "validation",
                     "--late").startswith("phase validation of contest takes no uploads")
    c.judge(late)
    write_windows(c, sanity=f"closes = {closed}")  # validation opens now
    assert c.refused("carry", "contest", str(late), "--phase", "validation") == (
        f"entry {late} is a late entry: only official entries of phase sanity can be carried into phase validation.")
    assert c.carry(a1, "validation") > late
    # Late entries never reach the official board.
    assert [r["owner"] for r in json.loads(c.vmjudge("leaderboard", "contest", "--phase", "sanity",
                                                     "--json").stdout)] == ["alice"]
    assert [r["owner"] for r in json.loads(c.vmjudge("leaderboard", "contest", "--phase", "sanity", "--late",
                                                     "--json").stdout)] == ["bob"]
    write_windows(c)  # a phase that never closes takes no late entries
    assert c.refused("submit", "contest", str(c.archive("bob")), "--owner", "bob", "--phase", "sanity",
                     "--late") == ("phase sanity of contest never closes, so it takes no late entries: submit "
                                   "without --late.")


def test_each_phase_holds_each_owner_to_its_own_limits(tmp_path, backend):
    c = make_contest(tmp_path, backend, sanity="max_submitted_per_owner = 4\nmax_scored_per_owner = 2")
    a1, a2 = c.submit("alice"), c.submit("alice")
    assert c.refused("submit", "contest", str(c.archive("alice")), "--owner", "alice") == (
        "alice has used the 2 scored entries allowed for phase sanity of contest (0 scored, 2 still being "
        "evaluated): an entry that ends without a score gives its place back, and a dry run (an entry holding "
        "DRYRUN) is always accepted.")
    c.judge(a1)
    c.judge(a2, fail=True)  # a failed entry gives its scored place back, not its submitted one
    a3 = c.submit("alice")
    proc = c.vmjudge("submit", "contest", str(tar_of({"DRYRUN": b""}, c.root / "dry-entry.tar.gz")), "--owner",
                     "alice")
    assert "a dry run does not count: 0 scored entries remain for alice in phase sanity" in proc.stderr
    assert c.refused("submit", "contest", str(tar_of({"DRYRUN": b""}, c.root / "dry2-entry.tar.gz")), "--owner",
                     "alice") == ("alice has submitted 4 entries to phase sanity of contest, the most it takes from "
                                  "one owner (4).")
    b1 = c.submit("bob")  # bob's limits are his own
    c.judge(a3)
    c.judge(b1)
    # validation takes two entries that passed it from each owner; one still being judged does not count.
    v1, v2 = c.carry(a1, "validation"), c.carry(a3, "validation")
    c.judge(v1)
    assert c.queue.entry(v2).state == "queued"
    a4 = c.queue.add_entry("contest", "alice", False, "f" * 64, "x-entry.tar.gz", c.archives[0], phase="sanity")
    c.judge(a4)
    v3 = c.carry(a4, "validation")
    c.judge(v2)
    c.judge(v3)  # in flight when the second passed: it is judged, and counts
    a5 = c.queue.add_entry("contest", "alice", False, "e" * 64, "y-entry.tar.gz", c.archives[0], phase="sanity")
    c.judge(a5)
    assert c.refused("carry", "contest", str(a5), "--phase", "validation") == (
        "alice already has 3 entries that passed phase validation of contest, the most it takes from one owner "
        "(2): no further entry is accepted.")
    b2 = c.carry(b1, "validation")
    c.judge(b2)
    # test takes one carried entry from each promoted owner.
    c.vmjudge("promote", "contest", "--phase", "test", "--owners", "alice,bob")
    c.carry(v1, "test")
    assert c.refused("carry", "contest", str(v2), "--phase", "test") == (
        "alice has carried 1 entry to phase test of contest, the most it takes from one owner (1).")
    c.carry(b2, "test")


def validation_board(c: Contest, owners: list[tuple[str, int]]) -> dict[str, int]:
    """Each (owner, wrong answers) passes sanity and is judged in validation, carried in that
    order; returns owner -> validation entry."""
    carried = {}
    for owner, wrong in owners:
        entry = c.submit(owner)
        c.judge(entry)
        carried[owner] = c.carry(entry, "validation")
        c.judge(carried[owner], wrong=wrong)
    return carried


def test_promotion_takes_the_top_of_the_previous_board_as_it_orders_ties_and_is_recorded(contest):
    c = contest
    # dave and erin tie with alice's 0.75 but were carried later, so the board puts alice first,
    # then (within a second) the lower entry id: dave before erin. carol is behind them all.
    carried = validation_board(c, [("alice", 0), ("carol", 2), ("dave", 0), ("erin", 0)])
    board = json.loads(c.vmjudge("leaderboard", "contest", "--phase", "validation", "--json").stdout)
    assert [r["owner"] for r in board] == ["alice", "dave", "erin", "carol"]
    assert [r["score"] for r in board] == [0.75, 0.75, 0.75, 0.25]
    before = utc(time.time())
    assert c.vmjudge("promote", "contest", "--phase", "test", "--top", "2", "--by", "olga").stdout == (
        "promoted alice into phase test (place 1 of validation), top 2 of validation\n"
        "promoted dave into phase test (place 2 of validation), top 2 of validation\n")
    assert c.vmjudge("promote", "contest", "--phase", "test", "--owners", "carol,dave").stdout == (
        "promoted carol into phase test, chosen by the organisers\n"
        "dave was promoted into phase test before: left as it was\n")
    made = {p.owner: p for p in c.queue.phases.promotions("contest", "test")}
    assert set(made) == {"alice", "dave", "carol"}
    assert (made["alice"].by, made["alice"].place, made["carol"].place) == ("olga", 1, None)
    assert all(before <= p.at <= utc(time.time()) for p in made.values())
    # Participants see who was promoted, and how (vmjudge phases, the portal's API).
    doc = json.loads(c.vmjudge("phases", "contest", "--json").stdout)
    test = doc["phases"][2]
    assert [(p["owner"], p["place"], p["how"]) for p in test["promoted"]] == [
        ("alice", 1, "top 2 of validation"), ("dave", 2, "top 2 of validation"),
        ("carol", None, "chosen by the organisers")]
    assert all(set(p) == {"owner", "place", "how", "at"} for p in test["promoted"]) and "olga" not in json.dumps(doc)
    text = c.vmjudge("phases", "contest").stdout
    assert "test: open (from the start to no closing time); takes entries carried from validation, promoted owners " \
           "only; feedback errors and board hidden until published; training set phase validation's (2 records), " \
           "whose answers a carried entry's archive holds\n  promoted: alice (place 1), top 2 of " \
           "validation, " in text
    assert c.carry(carried["carol"], "test") and c.refused("carry", "contest", str(carried["erin"]), "--phase",
                                                           "test").startswith("erin was not promoted to phase test")
    # Refused in a sentence: a phase every owner may enter, both ways of choosing, neither.
    assert c.refused("promote", "contest", "--phase", "validation", "--top", "1") == (
        "phase validation of contest is open to every owner (entrants = \"all\"): there is no one to promote; set "
        "entrants = \"promoted\" in its [[phase]] table if only some may enter.")
    assert c.refused("promote", "contest", "--phase", "test", "--top", "1", "--owners", "x").startswith(
        "give either --top N")
    assert c.refused("promote", "contest", "--phase", "final", "--top", "1") == (
        "challenge contest has no phase 'final': its phases are sanity, validation, test.")


def test_a_phase_that_gives_no_feedback_shows_only_that_an_entry_was_received(tmp_path, backend):
    c = make_contest(tmp_path, backend, validation='feedback = "none"')
    a1 = c.submit("alice")
    c.judge(a1)
    v1 = c.carry(a1, "validation")
    site = c.site
    views = PhaseViews.load(c.queue)
    for moment in ("queued", "judged"):
        if moment == "judged":
            c.judge(v1, wrong=1)
        doc = show(site, c.queue, v1)
        assert (doc["state"], doc["stage"], doc["outcome"], doc["failed_stage"], doc["reason"], doc["scores"],
                doc["exam"], doc["figures"], doc["scorings"], doc["feedback"]) == \
            ("received", None, None, None, None, {}, None, {}, [], "none"), moment
        assert doc["report"].endswith("Phase validation gives no feedback until its results are published.\n\n"
                                      "Received: phase validation gives no feedback until its results are "
                                      "published.\n")
        row = participant.entry_row(c.queue.entry(v1), time.time(), views.feedback(c.queue.entry(v1), time.time()))
        assert (row["state"], row["stage"], row["score"], row["outcome"]) == ("received", None, None, None)
    # Its board is hidden; the organiser's is not.
    assert not views.board_shown("contest", "validation", time.time())
    assert [r.entry_id for r in leaderboard(c.queue, "contest", phase="validation")] == [v1]
    # An entry that fails in it is "received" too: its owner cannot tell.
    b1 = c.submit("bob")
    c.judge(b1)
    v2 = c.carry(b1, "validation")
    c.judge(v2, fail=True)
    assert show(site, c.queue, v2)["state"] == "received"
    # Nor can a carry tell: while validation's verdicts are hidden, any official entry of it is
    # carried, and the carried one is "received" too (test_phase_leaks.py, issue 54).
    c.vmjudge("promote", "contest", "--phase", "test", "--owners", "bob")
    t2 = int(c.vmjudge("carry", "contest", str(v2), "--phase", "test").stdout)
    assert show(site, c.queue, t2)["state"] == "received"
    page = site.layout.results_of(v1).report
    assert "Received" in page.read_text() and "0.5000" not in page.read_text()
    c.vmjudge("publish", "contest", "--phase", "validation")
    doc = show(site, c.queue, v1)
    assert (doc["state"], doc["scores"]["score"], doc["feedback"]) == ("done", 0.5, "full")
    assert show(site, c.queue, v2)["reason"] == "setup-error"
    assert "0.5000" in page.read_text()  # report.html, written again on publication


def test_a_phase_that_keeps_scores_back_publishes_every_outcome_at_the_exams_cap(tmp_path, backend):
    """Under feedback "errors" participants see an entry's verdict but not its exam's time: were
    its outcome published at its own tenth (#30), when the verdict appeared would give that time
    away. Its entries are published at the cap, as if each exam took all of it."""
    c = make_contest(tmp_path, backend, validation='feedback = "errors"')
    a1 = c.submit("alice")
    c.judge(a1, examined=True)
    step = EXAM["stage_limit"] / STEPS
    shown = tenths(EXAM["stage_seconds"], EXAM["stage_limit"])
    assert shown is not None and 0 < shown < STEPS  # a phase with full feedback: the exam's own tenth
    sanity = c.queue.entry(a1)
    assert sanity.published - sanity.exam_started == pytest.approx(step * shown)
    c.exams_published()
    v1 = c.carry(a1, "validation")
    c.judge(v1, examined=True)
    validation = c.queue.entry(v1)
    assert validation.published - validation.exam_started == pytest.approx(EXAM["stage_limit"])
    assert participant.examining(validation, validation.exam_started + EXAM["stage_limit"] - 1)
    assert not participant.examining(validation, validation.exam_started + EXAM["stage_limit"])


def test_entries_usage_and_rescore_know_the_phase(contest):
    c = contest
    a1 = c.submit("alice")
    c.judge(a1)
    v1 = c.carry(a1, "validation")
    c.judge(v1, wrong=1)
    listed = json.loads(c.vmjudge("entries", "contest", "--phase", "validation", "--json").stdout)
    assert [(e["id"], e["phase"], e["carried_from"]) for e in listed["entries"]] == [(v1, "validation", a1)]
    text = c.vmjudge("entries", "contest").stdout.splitlines()
    assert text[1].split()[:2] == [str(v1), "contest/validation"] and text[2].split()[:2] == [str(a1), "contest/sanity"]
    assert c.refused("entries", "contest", "--phase", "final") == (
        "challenge contest has no phase 'final': its phases are sanity, validation, test.")
    usage = json.loads(c.vmjudge("usage", "contest", "--json").stdout)
    assert [(o["owner"], o["phase"], o["entries"], o["scored"]) for o in usage["owners"]] == [
        ("alice", "sanity", 1, 1), ("alice", "validation", 1, 1)]
    assert c.vmjudge("usage", "contest", "--phase", "validation").stdout.startswith(
        "alice in phase validation: 1 entries, 1 scored, ")
    # Each phase is re-scored against its own reference, and must be named.
    assert c.refused("rescore", "contest") == (
        "challenge contest has phases, each scored against its own reference: name the phase to work on with "
        "--phase (sanity, validation, test).")
    doc = json.loads(c.vmjudge("rescore", "contest", "--phase", "validation", "--json").stdout)
    assert doc["phase"] == "validation" and [(e["entry_id"], e["new"]["score"]) for e in doc["entries"]] == [(v1, 0.5)]
    assert doc["reference"] == str(c.directory / "phases" / "validation" / "reference")
    doc = json.loads(c.vmjudge("rescore", "contest", "--phase", "sanity", "--entries", str(v1), "--json",
                               ok=False).stdout)
    assert doc["entries"][0]["problem"] == (f"entry {v1} is an entry of phase validation, not sanity: leave it out or "
                                            "name its phase with --phase validation.")


def test_a_challenge_without_phases_refuses_a_phase_in_one_sentence(tmp_path, backend):
    c = make_contest(tmp_path, backend)
    c.queue.add_challenge("hostile", QUICK, "key")
    assert c.refused("submit", "hostile", str(c.archive("alice")), "--owner", "alice", "--phase", "test") == (
        "hostile has no phases: send the entry without naming one.")
    assert c.refused("submit", "contest", str(c.archive("alice")), "--owner", "alice", "--phase", "final") == (
        "contest has no phase 'final': choose one of sanity, validation, test.")
    entry = int(c.vmjudge("submit", "hostile", str(c.archive("alice")), "--owner", "alice").stdout)
    assert c.queue.entry(entry).phase is None
    assert c.refused("leaderboard", "hostile", "--phase", "test") == (
        "challenge hostile has no phases, so there is no phase 'test': leave out --phase.")


def test_a_queue_made_before_phases_gains_their_columns_and_tables(queue_location):
    queue = Queue(queue_location)
    with queue.database.transaction() as db:
        db.execute("ALTER TABLE entries DROP COLUMN phase")
        db.execute("ALTER TABLE entries DROP COLUMN carried_from")
        db.execute("DROP TABLE promotions")
        db.execute("DROP TABLE publications")
    queue = Queue(queue_location)
    with queue.database.connect() as db:
        assert db.execute("SELECT phase, carried_from FROM entries").fetchall() == []
        assert db.execute("SELECT * FROM promotions").fetchall() == []
        assert db.execute("SELECT * FROM publications").fetchall() == []


def test_the_portal_follows_the_phases(tmp_path, backend):
    """A participant's pages and API answers for a contest: the phase on uploads, "Choose this
    entry for phase P" (form and API), refusals with their status, the phases page and its JSON,
    and a test phase's entry and board kept back until the phase is published."""
    from starlette.testclient import TestClient

    from vmjudge.web.app import create_app

    from .web_home import csrf_of, sign_in

    c = make_contest(tmp_path, backend)
    a1, b1 = c.submit("alice"), c.submit("bob")
    c.judge(a1)
    c.judge(b1, wrong=1)
    token = c.vmjudge("owner", "add", "alice").stdout.strip().split()[-1]
    bearer = {"Authorization": f"Bearer {token}"}
    client = TestClient(create_app(c.site, secure_cookies=False), raise_server_exceptions=False,
                        follow_redirects=False)
    assert sign_in(client, token).status_code == 303
    # Uploading names the phase before the archive; a phase taking no uploads is refused at once.
    archive = c.archive("alice")
    answer = client.post("/api/entries", headers=bearer, data={"challenge": "contest", "phase": "validation"},
                         files={"archive": (archive.name, archive.read_bytes())})
    assert (answer.status_code, answer.json()["error"]) == (409, (
        "phase validation of contest takes no uploads: its entries are carried from phase sanity (`vmjudge carry "
        "contest --phase validation ENTRY_ID`, or \"Choose for phase validation\" on the entry's page)."))
    answer = client.post("/api/entries", headers=bearer, data={"challenge": "contest"},
                         files={"archive": (archive.name, archive.read_bytes())})
    assert answer.status_code == 201 and answer.json()["phase"] == "sanity"
    # The report page offers the carry; another owner's entry is not found.
    page = client.get(f"/entries/{a1}")
    assert 'id="carry-validation"' in page.text and "Choose this entry for phase validation" in page.text
    assert "its quiz runs again on the\n  training set of this entry's phase, with the answers it holds" in page.text
    form = {"csrf": csrf_of(client, f"/entries/{a1}"), "phase": "validation"}
    assert client.post(f"/entries/{b1}/carry", data=form).status_code == 404
    carried = client.post(f"/entries/{a1}/carry", data=form)
    assert carried.status_code == 201
    v1 = int(carried.text.split('id="entry-id">')[1].split("<")[0])
    assert (c.queue.entry(v1).carried_from, c.queue.entry(v1).phase) == (a1, "validation")
    answer = client.post(f"/api/entries/{a1}/carry", headers=bearer, data={"phase": "validation"})
    assert (answer.status_code, answer.json()["error"]) == (409, (
        f"entry {a1} was carried into phase validation already, as entry {v1}: an entry is carried into a phase "
        "once."))
    c.judge(v1)
    answer = client.post(f"/api/entries/{v1}/carry", headers=bearer, data={"phase": "test"})
    assert (answer.status_code, answer.json()["error"]) == (409, (
        "alice was not promoted to phase test of contest: only the owners the organisers promoted from phase "
        "validation may enter it."))
    c.vmjudge("promote", "contest", "--phase", "test", "--top", "1")
    answer = client.post(f"/api/entries/{v1}/carry", headers=bearer, data={"phase": "test"})
    assert answer.status_code == 201 and answer.json()["carried_from"] == v1 and answer.json()["phase"] == "test"
    t1 = answer.json()["id"]
    assert answer.json()["budget"] is None  # a hidden phase keeps the budget's tenths back
    c.judge(t1, wrong=3)  # 4/8: one number that no other entry of alice's has
    # Before publication: the test entry shows its verdict and nothing else, and its board is hidden.
    doc = client.get(f"/api/entries/{t1}", headers=bearer).json()
    assert (doc["outcome"], doc["scores"], doc["exam"], doc["figures"], doc["feedback"]) == \
        ("scored", {}, None, {}, "errors")
    rows = {e["id"]: e for e in client.get("/entries.json").json()["entries"]}
    assert (rows[t1]["phase"], rows[t1]["score"]) == ("test", None) and rows[v1]["score"] == 0.75
    assert expected("test", 3) == 0.5
    assert "0.5" not in client.get("/entries").text.split(f'id="entry-{t1}"')[1].split("</tr>")[0]
    board = client.get("/leaderboards/contest?phase=test")
    assert "hidden until the organisers publish" in board.text and 'id="leaderboard"' not in board.text
    assert "0.7500" in client.get("/leaderboards/contest?phase=validation").text
    phases = client.get("/api/challenges/contest/phases", headers=bearer).json()
    assert [(p["name"], p["published"], [x["owner"] for x in p["promoted"]]) for p in phases["phases"]] == [
        ("sanity", None, []), ("validation", None, []), ("test", None, ["alice"])]
    assert "alice" in client.get("/phases/contest").text
    boards = client.get("/leaderboards").text
    assert all(f"/leaderboards/contest?phase={p}" in boards for p in ("sanity", "validation", "test"))
    assert client.get("/leaderboards/contest?phase=final").status_code == 404
    assert 'name="phase"' in client.get("/upload").text and '<option value="sanity">' in client.get("/upload").text
    c.vmjudge("publish", "contest", "--phase", "test")
    doc = client.get(f"/api/entries/{t1}", headers=bearer).json()
    assert (doc["scores"]["score"], doc["exam"]["records"], doc["feedback"]) == (0.5, 8, "full")
    assert "0.5000" in client.get("/leaderboards/contest?phase=test").text
    assert client.get("/api/challenges/contest/phases", headers=bearer).json()["phases"][2]["published"]


def test_a_phase_for_promoted_owners_that_takes_uploads_refuses_the_others_before_storing(tmp_path, backend):
    """A final phase with new uploads from the promoted owners only: refused, for anyone else,
    before their archive is copied into the spool (submit) or its first byte stored (portal): a
    broken archive gets the promotion's sentence, not the archive check's."""
    from starlette.testclient import TestClient

    from vmjudge.web.app import create_app

    from .phased import write_sets

    c = make_contest(tmp_path, backend)
    (c.directory / "challenge.toml").write_text(contest_toml() + '\n[[phase]]\nname = "final"\nentrants = '
                                                '"promoted"\nmax_submitted_per_owner = 1\n')
    write_sets(c.directory, {"final": SETS["sanity"]})
    spooled = sorted(p for p in c.site.layout.spool.rglob("*") if p.is_file())
    said = ("bob was not promoted to phase final of contest: only the owners the organisers promoted from phase "
            "test may enter it.")
    broken = c.root / "broken-entry.tar.gz"
    broken.write_bytes(b"not a tar.gz at all")
    assert c.refused("submit", "contest", str(broken), "--owner", "bob", "--phase", "final") == said
    assert c.refused("submit", "contest", str(broken), "--owner", "bob", "--phase", "sanity").startswith(
        "broken-entry.tar.gz")  # the archive check's own sentence, where bob may enter
    assert sorted(p for p in c.site.layout.spool.rglob("*") if p.is_file()) == spooled
    token = c.vmjudge("owner", "add", "bob").stdout.strip().split()[-1]
    client = TestClient(create_app(c.site, secure_cookies=False), raise_server_exceptions=False)
    archive = broken
    answer = client.post("/api/entries", headers={"Authorization": f"Bearer {token}"},
                         data={"challenge": "contest", "phase": "final"},
                         files={"archive": (archive.name, archive.read_bytes())})
    assert (answer.status_code, answer.json()) == (409, {"error": said})
    assert sorted(p for p in c.site.layout.spool.rglob("*") if p.is_file()) == spooled
    c.vmjudge("promote", "contest", "--phase", "final", "--owners", "bob")
    entry = c.submit("bob", "--phase", "final")
    assert c.queue.entry(entry).phase == "final"
    assert c.refused("submit", "contest", str(c.archive("bob")), "--owner", "bob", "--phase", "final") == (
        "bob has submitted 1 entry to phase final of contest, the most it takes from one owner (1).")


def test_a_stage_runs_in_its_phases_image_and_a_carried_entry_in_its_sources(tmp_path, backend, monkeypatch):
    """The sanity phase here has an image of its own (python3-numpy), which validation, carrying
    from it, keeps. The daemon's stage looks for the image of the entry's phase: with only the
    challenge's own [image] built, it is the judge's failure (image-missing, run again later),
    never the entry's; with the phase's image built, it goes on, to libvirt (unreachable here)."""
    monkeypatch.setenv("VMJUDGE_URI", NO_VM_ENV["VMJUDGE_URI"])
    c = make_contest(tmp_path, backend, sanity='training = "phases/sanity/training"\n[phase.image]\n'
                                               'packages = ["python3-numpy"]')
    write_training(c.directory, "phases/sanity/training", {"f1": 7, "f2": 8})
    fake_image(c.site, c.directory)  # the challenge's own [image]: no phase of this contest runs in it

    def first_attempt(entry_id: int) -> tuple[str | None, str | None]:
        run_stage(c.queue, c.site, c.queue.claim_next(only=entry_id), Slot(0))
        [run] = c.queue.stage_runs(entry_id)
        return run.reason, run.message

    missing = ("image-missing", "the guest image for this challenge is not built: run `vmjudge image build "
                                "CHALLENGE_DIR`.")
    assert first_attempt(c.submit("alice")) == missing
    numpy = fake_image(c.site, c.directory, recipe=ImageRecipe(packages=("python3-numpy",)))
    assert first_attempt(c.submit("bob"))[0] == "libvirt-unreachable"
    carol = c.submit("carol")
    c.judge(carol)
    carried = c.carry(carol, "validation")
    shutil.rmtree(numpy.directory)
    assert first_attempt(carried) == missing
    assert c.queue.entry(carried).state == "queued" and c.queue.entry(carried).outcome is None
