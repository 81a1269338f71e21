"""#30's heart, with real VMs: what participants see cannot tell apart two entries that differ
only in what the hidden test set could drive.

Three homes judge one entry each of af2017 cut to 4 test records (a daemon of one slot each,
two at a time), as the same owner with the same archive name, so each entry is entry 1 of its
home:
- `silent`: answers a label for each test record that only the hidden data decides;
- `loud`: the same answers, but on the test records (names starting with B) it prints to
  stdout and stderr, sleeps as long as the record's label says and holds as much memory as
  the label says, all within the first tenth of the exam's time and memory caps;
- `slower`: like `loud`, with a longer sleep per test record, so that its exam's time ends in
  the second tenth of the cap.
A `vmjudge web` serves each home, and a poller reads every participant page and API answer
every 0.5 s from submission until after the publish time; the CLI's documents (show, show
--json, the leaderboard in each format) are read while the entry is being examined and once
it is published, with report.html.

Then: silent's and loud's documents are byte-identical once what differs by submission alone
is normalised (the times of day: submission, exam start and so publish time; the session's
CSRF token; the archive's sha256, the participant's receipt of an archive that differs by
construction; the figures of stages 1 and 2, measured on the participant's own training
files, which differ by the machine's noise from run to run), while the organiser's figures
show the channel is real (loud's peak memory per record follows the labels, its exam.log
holds what it printed). slower's differ from silent's in the exam's time tenth alone. No poll
sees an entry leave the exam before its publish time, which is the exam's start plus a whole
number of tenths of the cap.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from vmjudge.config import load_site
from vmjudge.queue.db import Queue

from .cli import REPO, run_cli
from .published import wait_until_published
from .test_pipeline import archive
from .web_process import Portal, running_portal, signed_in_client

pytestmark = pytest.mark.timeout(2400)
AF2017 = REPO / "examples" / "af2017"
# The exam's cap: its tenth, the step participants can time, is 60 s. The entries are shell
# only and the challenge is af2017 cut to 2 training and 4 test records (one of each label),
# so the silent exam takes 10-30 s under TCG with two VMs on two cores, loud's a few
# seconds more: both well inside the first tenth.
EXAM_CAP = 600
STEP = EXAM_CAP / 10
TRAINING = ("A0001", "A0002")
TEST = ("B0001", "B0002", "B0004", "B0007")
VM = "[vm]\nvcpus = 1\nmemory = 2048\nhome = 256\n\n"
LIMITS = f"[limits]\nsetup = 120\nper_record = 30\nquiz_total = 600\nexam_total = {EXAM_CAP}\n\n"
MARKER = "VMJ-NONINTERFERENCE-OUTPUT"
# The entry: the submitted answers for the training records, and for a test record a label
# that only the hidden data decides (the first hex digit of its signal file's md5).
NEXT = r"""#!/bin/sh
case "$1" in
A*) grep "^$1," known.txt >> answers.txt ;;
B*) case "$(md5sum "$1.dat" | cut -c1)" in [0-3]) label=N;; [4-7]) label=O;; [89ab]) label=A;; *) label="~";; esac
    echo "$1,$label" >> answers.txt ;;
esac
"""
# loud and slower add, on test records: print, and sleep and hold memory as the label says
# (dd's buffer is its block size: the memory cap's tenth is about 180 MiB); slower sleeps
# SLOWER s more per record, which pushes its exam past the first tenth.
LOUD = r"""case "$1" in B*)
i=0; while [ $i -lt 100 ]; do echo "{marker} $1 $label $i"; echo "{marker} err $1 $label $i" >&2; i=$((i+1)); done
case "$label" in N) s=0; m=1;; O) s=0.25; m=40;; A) s=0.5; m=60;; *) s=0.75; m=80;; esac
dd if=/dev/zero of=/dev/null bs=${m}M count=1 2>/dev/null
sleep "$s"; sleep {extra}
;; esac
"""
SLOWER = 17
KINDS = ("silent", "loud", "slower")
TIME_OF_DAY = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
CSRF_VALUE = re.compile(r'(name="csrf" value=")[^"]+')
RECEIPT = re.compile(r'("archive_sha256":\s*")[0-9a-f]{64}')
# The report's lines on stages 1 and 2, and the report page's (#38: its bars and records of
# those stages, each on a line marked data-training).
TRAINING_LINES = re.compile(r"^(Resources: |Slowest records: |.*\bdata-training\b).*$", re.M)


def label_of(record: str) -> str:
    digit = int(hashlib.md5((AF2017 / "test" / f"{record}.dat").read_bytes()).hexdigest()[0], 16)
    return "NOA~"[digit // 4]


def entry_archive(root: Path, kind: str) -> Path:
    entry = root / "entries" / kind
    entry.mkdir(parents=True)
    answers = "".join(line + "\n" for line in (AF2017 / "entries" / "good" / "answers.txt").read_text().split()
                      if line.split(",")[0] in TRAINING).encode()
    extra = "" if kind == "silent" else LOUD.replace("{marker}", MARKER).replace("{extra}",
                                                                                 str(SLOWER if kind == "slower" else 0))
    for name, data in {"answers.txt": answers, "known.txt": answers, "setup.sh": b"true\n",
                       "next.sh": (NEXT + extra).encode(), "AUTHORS.txt": b"vmjudge tests\n",
                       "LICENSE.txt": b"MIT\n"}.items():
        (entry / name).write_bytes(data)
    (root / "archives" / kind).mkdir(parents=True)
    return archive(entry, root / "archives" / kind / "alice-entry.tar.gz")


def challenge_copy(root: Path) -> Path:
    """af2017 cut to TRAINING and TEST, with room in its limits (two VMs share two cores), a
    longer exam cap, and a VM whose memory cap's tenth holds what loud adds."""
    directory = root / "af2017"
    shutil.copytree(AF2017, directory)  # with entries/: [portal] sample names entries/good
    for subset, keep in (("training", TRAINING), ("test", TEST)):
        for path in (directory / subset).iterdir():
            if path.stem not in keep and path.name not in ("RECORDS", "REFERENCE.csv"):
                path.unlink()
        (directory / subset / "RECORDS").write_text("".join(r + "\n" for r in keep))
    for csv, keep in ((directory / "training" / "REFERENCE.csv", TRAINING),
                      (directory / "reference" / "REFERENCE.csv", TEST)):
        csv.write_text("".join(line + "\n" for line in csv.read_text().split() if line.split(",")[0] in keep))
    toml = (directory / "challenge.toml").read_text()
    (directory / "challenge.toml").write_text(toml.split("[vm]")[0] + VM + LIMITS
                                              + "[results]" + toml.split("[results]")[1])
    return directory


@dataclass
class Judged:
    kind: str
    home: Path
    token: str
    base: str
    portal: Portal
    polls: list[tuple[float, float, str, int, str]] = field(default_factory=list)  # sent, received, path, status, body
    cli_examined: dict[str, str] = field(default_factory=dict)
    cli_published: dict[str, str] = field(default_factory=dict)

    def queue(self) -> Queue:
        site = load_site(self.home)
        return Queue(site.layout.queue_db)

    def cli(self, *args: str) -> str:
        proc = run_cli(*args, home=self.home)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    def documents(self, out: dict[str, str]) -> None:
        """Every participant document the command line gives of entry 1."""
        out["show"] = self.cli("show", "1")
        out["show --json"] = self.cli("show", "1", "--json")
        out["leaderboard"] = self.cli("leaderboard", "af2017")
        out["leaderboard --json"] = self.cli("leaderboard", "af2017", "--json")
        for kind in ("csv", "html"):
            path = self.home / f"board.{kind}"
            self.cli("leaderboard", "af2017", f"--{kind}", str(path))
            out[f"leaderboard --{kind}"] = TIME_OF_DAY.sub("T", path.read_text())  # "Generated" time


PATHS = ("/entries", "/entries.json", "/entries/1", "/leaderboards", "/leaderboards/af2017",
         "/leaderboards/af2017?late=1", "/upload")
API = ("/api/entries", "/api/entries/1")


def poll(judged: list[Judged], stop: threading.Event) -> None:
    """The API every 0.5 s, the pages every 2 s (three portals and three VMs share two cores)."""
    clients = {j.kind: (signed_in_client(j.base, j.token), {"Authorization": f"Bearer {j.token}"}) for j in judged}
    rounds = 0
    while not stop.is_set():
        rounds += 1
        for j in judged:
            client, bearer = clients[j.kind]
            for path in API + (PATHS if rounds % 4 == 1 else ()):
                sent = time.time()
                r = client.get(path, headers=bearer if path.startswith("/api/") else None)
                j.polls.append((sent, time.time(), path, r.status_code, r.text))
        stop.wait(0.5)


@pytest.fixture(scope="module")
def judged(site, image, conn):
    root = Path(tempfile.mkdtemp(prefix="noninterference-", dir=site.home))
    os.chmod(root, 0o711)
    challenge = challenge_copy(root)
    homes: list[Judged] = []
    daemons: dict[str, subprocess.Popen | None] = dict.fromkeys(KINDS)
    with ExitStack() as portals:
        portals.callback(shutil.rmtree, root)  # last, after the portals have ended
        try:
            for kind in KINDS:
                home = root / kind
                home.mkdir()
                os.chmod(home, 0o711)
                (home / "images").symlink_to(site.layout.images)  # share the test image cache
                (home / "site.toml").write_text("[slots]\novercommit = true\n")  # three daemons, two cores
                assert run_cli("challenge", "add", str(challenge), home=home).returncode == 0
                token = run_cli("owner", "add", "alice", home=home).stdout.strip()
                portal = portals.enter_context(running_portal(home, root / f"{kind}-web.log"))
                homes.append(Judged(kind, home, token, portal.base, portal))
            for j in homes:
                assert j.cli("submit", "af2017", str(entry_archive(root, j.kind)), "--owner", "alice").strip() == "1"
            stop = threading.Event()
            poller = threading.Thread(target=poll, args=(homes, stop), daemon=True)
            poller.start()
            # Two VMs at a time on two cores: silent and slower first, loud once silent is done.
            by_kind = {j.kind: j for j in homes}

            def start(kind: str) -> subprocess.Popen:
                return subprocess.Popen([sys.executable, "-m", "vmjudge.cli", "daemon", "--until-idle", "-q"], cwd=REPO,
                                        env={**os.environ, "VMJUDGE_HOME": str(by_kind[kind].home)},
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

            daemons["silent"], daemons["slower"] = start("silent"), start("slower")
            # The command line's documents once each entry is being examined (its exam started).
            pending = list(homes)
            deadline = time.monotonic() + 1800
            while pending or any(d is None or d.poll() is None for d in daemons.values()):
                assert time.monotonic() < deadline, "the three entries were not judged within 30 min"
                if daemons["loud"] is None and daemons["silent"].poll() is not None:
                    daemons["loud"] = start("loud")
                for j in list(pending):
                    entry = j.queue().entry(1)
                    if entry.exam_started is not None:
                        j.documents(j.cli_examined)
                        entry = j.queue().entry(1)
                        assert entry.published is None or time.time() < entry.published, \
                            f"{j.kind}: the documents were read too late to be read while being examined"
                        pending.remove(j)
                    elif entry.state == "done":
                        raise AssertionError(f"{j.kind} ended before its exam: {j.cli('show', '1', '--organiser')}")
                stop.wait(0.5)  # polling the queue and the daemons for a condition, under the deadline
            for kind, d in daemons.items():
                assert d is not None and d.returncode == 0, (kind, d.stderr.read() if d and d.stderr else "")
            for j in homes:
                wait_until_published(j.home)
            # Every path polled at least once after each entry's publish time, then the poller stops.
            published = {j.kind: j.queue().entry(1).published for j in homes}
            deadline = time.monotonic() + 120
            while not all({p for sent, _, p, _, _ in list(j.polls) if sent > published[j.kind]} == set(PATHS + API)
                          for j in homes):
                assert time.monotonic() < deadline, "the poller did not read every path after the publish times"
                stop.wait(0.5)
            stop.set()
            poller.join(timeout=60)
            for j in homes:
                j.documents(j.cli_published)
                j.cli_published["report.html"] = (j.home / "results" / "1" / "report.html").read_text()
            yield {j.kind: j for j in homes}
        finally:
            for d in daemons.values():  # a failed fixture leaves no daemon running (the portals end with the stack)
                if d is not None and d.poll() is None:
                    d.kill()
                    d.wait(timeout=30)


def normalised(text: str) -> str:
    """What differs by submission alone, and by the machine's noise on the participant's own
    training files, made equal: times of day, the session's CSRF token, the archive's sha256
    (the participant's receipt of their own, different, archive), the figures of stages 1
    and 2 (the exam's, in tenths, are kept)."""
    text = TIME_OF_DAY.sub("T", CSRF_VALUE.sub(r"\1*", RECEIPT.sub(r"\1*", text)))
    try:
        doc = json.loads(text)
    except ValueError:
        return TRAINING_LINES.sub("*", text)
    return json.dumps(_training_figures_out(doc), sort_keys=True)


def _training_figures_out(doc):
    if isinstance(doc, list):
        return [_training_figures_out(d) for d in doc]
    if not isinstance(doc, dict):
        return doc
    out = {k: _training_figures_out(v) for k, v in doc.items()}
    if isinstance(out.get("figures"), dict):
        out["figures"] = {k: (v if k == "exam" else "*") for k, v in out["figures"].items()}
    if isinstance(out.get("report"), str):
        out["report"] = TRAINING_LINES.sub("*", out["report"])
    return out


def seen(j: Judged, published: float) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Each path's distinct normalised answers while being examined (received after the exam
    started, before the publish time) and after the publish time (sent after it)."""
    entry = j.queue().entry(1)
    assert entry.exam_started is not None
    examined: dict[str, set[str]] = {}
    after: dict[str, set[str]] = {}
    for sent, received, path, status, body in j.polls:
        assert status == 200, (j.kind, path, body)
        if sent > entry.exam_started and received < published:
            examined.setdefault(path, set()).add(normalised(body))
        elif sent > published:
            after.setdefault(path, set()).add(normalised(body))
    return examined, after


def exam_stage_of(body: str) -> tuple[str, str | None]:
    doc = json.loads(body)
    return doc["state"], doc["stage"]


def test_no_poll_sees_an_entry_leave_the_exam_before_its_publish_time(judged):
    for j in judged.values():
        entry = j.queue().entry(1)
        steps = (entry.published - entry.exam_started) / STEP
        tenth = json.loads(j.cli_published["show --json"])["figures"]["exam"]["time_tenths"]
        assert steps == pytest.approx(round(steps), abs=1e-6) and round(steps) >= tenth >= 1, (j.kind, steps)
        examined = [(sent, received, exam_stage_of(body)) for sent, received, path, _, body in j.polls
                    if path == "/api/entries/1" and sent > entry.exam_started]
        before = [stage for _, received, stage in examined if received < entry.published]
        assert before and set(before) == {("running", "exam")}, (j.kind, set(before))
        after = [stage for sent, _, stage in examined if sent > entry.published]
        assert after and set(after) == {("done", None)}, (j.kind, set(after))
        listed = [json.loads(body)["entries"][0] for sent, received, path, _, body in j.polls
                  if path == "/api/entries" and sent > entry.exam_started and received < entry.published]
        assert listed and {(e["state"], e["stage"], e["score"]) for e in listed} == {("running", "exam", None)}


def test_the_channels_are_real_for_the_organiser(judged):
    """What loud did differently on the test records is in the organiser's view: its exam
    times follow the labels, its memory is higher, its exam.log holds what it printed."""
    figures = {}
    for kind in ("silent", "loud"):
        doc = json.loads(judged[kind].cli("show", "1", "--json", "--organiser"))
        exam = [a for a in doc["organiser"]["attempts"] if a["stage"] == "exam" and a["status"] == "passed"][-1]
        figures[kind] = {r["name"]: r for r in exam["figures"]["commands"]}
    loud, silent = figures["loud"], figures["silent"]
    # Memory is measured exactly: each record's peak follows the label it was told to hold.
    peak = {label_of(r): loud[r]["peak_memory"] for r in loud}
    assert peak["~"] > peak["A"] > peak["O"] > peak["N"] and peak["~"] >= 80 * 2**20, peak
    assert peak["~"] > max(r["peak_memory"] for r in silent.values()) + 64 * 2**20
    # Time by label is under TCG's noise per record here (test_pipeline shows it with longer
    # sleeps), so the sleeps are seen whole: loud's test records took longer in all.
    assert sum(r["seconds"] for r in loud.values()) > 1.5
    assert MARKER in (judged["loud"].home / "results" / "1" / "exam.log").read_text(errors="replace")


def test_silent_and_loud_look_the_same_to_participants(judged):
    silent, loud = judged["silent"], judged["loud"]
    s_entry, l_entry = silent.queue().entry(1), loud.queue().entry(1)
    assert (s_entry.outcome, l_entry.outcome) == ("scored", "scored") and s_entry.scores == l_entry.scores
    s_examined, s_after = seen(silent, s_entry.published)
    l_examined, l_after = seen(loud, l_entry.published)
    assert set(s_examined) == set(PATHS + API) and set(s_after) == set(PATHS + API)
    for path in PATHS + API:
        assert len(s_examined[path]) == 1, (path, s_examined[path])  # one document all through the exam
        assert s_examined[path] == l_examined[path], path
        assert s_after[path] == l_after[path], path
    for docs in ("cli_examined", "cli_published"):
        s_docs, l_docs = getattr(silent, docs), getattr(loud, docs)
        assert set(s_docs) == set(l_docs)
        for name in s_docs:
            assert normalised(s_docs[name]) == normalised(l_docs[name]), (docs, name)
    everything = json.dumps([p[4] for p in loud.polls]) + json.dumps([loud.cli_examined, loud.cli_published])
    assert MARKER not in everything and "B0001" not in everything


def test_an_exam_that_crosses_a_tenth_differs_in_that_tenth_alone(judged):
    silent, slower = judged["silent"], judged["slower"]
    s_entry, x_entry = silent.queue().entry(1), slower.queue().entry(1)
    s_doc, x_doc = (json.loads(j.cli_published["show --json"]) for j in (silent, slower))
    s_tenth, x_tenth = s_doc["figures"]["exam"]["time_tenths"], x_doc["figures"]["exam"]["time_tenths"]
    assert x_tenth > s_tenth, (s_tenth, x_tenth)
    assert x_entry.published - x_entry.exam_started >= x_tenth * STEP - 1e-6

    def same_tenth(text: str) -> str:
        text = text.replace(f"time {x_tenth}/10 of", f"time {s_tenth}/10 of")
        return re.sub(r'("time_tenths": )' + str(x_tenth) + r"\b", r"\g<1>" + str(s_tenth), text)

    for name, text in silent.cli_examined.items():  # while examined: nothing at all differs
        assert normalised(text) == normalised(slower.cli_examined[name]), name
    differ = set()
    for name, text in silent.cli_published.items():
        other = slower.cli_published[name]
        if normalised(text) != normalised(other):
            differ.add(name)
        assert normalised(text) == normalised(same_tenth(other)), name
    assert differ == {"show", "show --json", "report.html"}  # the boards give no exam figure at all
    s_examined, _ = seen(silent, s_entry.published)
    x_examined, _ = seen(slower, x_entry.published)
    assert s_examined == x_examined
