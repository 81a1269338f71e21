"""Control characters that entries and submitters choose never reach the organiser's terminal
raw: through the real `vmjudge` command (no VMs), an owner, an archive name and a stage's
output holding escape sequences are shown escaped by every command that prints them."""

from __future__ import annotations

import hashlib
import json
import logging
import subprocess
from pathlib import Path

import pytest

from vmjudge.config import load_site
from vmjudge.queue.db import Queue
from vmjudge.terminal import PrintableFormatter, printable

from .cli import run_cli
from .test_spool import make_tar

REPO = Path(__file__).resolve().parent.parent
AF2017 = REPO / "examples" / "af2017"

OWNER = "\x1b]0;pwned\x07mallory"  # retitles the terminal window
ARCHIVE = "x\x1b[2J-entry.tar.gz"  # clears the screen
OUTPUT = "\x1b[31mred\x1b[0m \x9b2J c1 \u202eevil\u202c done\r\x7f"  # colour, C1 CSI, bidi override, CR, DEL
# What must never be written raw, as UTF-8 bytes: ESC, BEL, C1 CSI, RLO, PDF, CR, DEL.
RAW = [c.encode() for c in "\x1b\x07\x9b\u202e\u202c\r\x7f"]


@pytest.mark.parametrize("text, shown", [
    ("plain text", "plain text"),
    ("a\nb\tc", "a\nb\tc"),  # newlines and tabs are how reports are laid out
    ("\x1b[2J", "\\x1b[2J"),
    ("bell\x07 nul\x00 cr\r del\x7f", "bell\\x07 nul\\x00 cr\\r del\\x7f"),
    ("c1 \x85 \x9b \x9f", "c1 \\x85 \\x9b \\x9f"),
    ("\u202aLRE \u202eRLO \u2066LRI \u2069PDI \u200fRLM \u061cALM", "\\u202aLRE \\u202eRLO \\u2066LRI \\u2069PDI "
                                                                   "\\u200fRLM \\u061cALM"),
    ("caf\u00e9 \u65e5\u672c \u00a0", "caf\u00e9 \u65e5\u672c \u00a0"),  # letters of every script stay
    ("not utf-8 \udcff", "not utf-8 \\udcff"),  # a lone surrogate, from a file name that was not UTF-8
])
def test_printable_escapes_what_a_terminal_acts_on(text, shown):
    assert printable(text) == shown


def test_log_lines_are_escaped():
    record = logging.LogRecord("vmjudge", logging.WARNING, __file__, 1, "entry %d by %s", (5, OWNER), None)
    line = PrintableFormatter("%(levelname)s %(message)s").format(record)
    assert line == "WARNING entry 5 by \\x1b]0;pwned\\x07mallory"


class Home:
    """A home with af2017 registered. `submit` now refuses such names, but a home holds entries
    that an older vmjudge accepted, so they are put in its queue here as that version did."""

    def __init__(self, tmp_path: Path):
        self.tmp = tmp_path
        self.site = load_site(tmp_path / "home")
        self.site.home.mkdir()
        self.queue = Queue(self.site.layout.queue_db)
        self.queue.add_challenge("af2017", AF2017, "key")
        self.made = 0

    def run(self, *args: str) -> subprocess.CompletedProcess:
        """The command's output as bytes, exactly what a terminal would be sent."""
        return run_cli(*args, home=self.site.home, text=False)

    def submit(self, owner: str = OWNER, name: str = ARCHIVE) -> int:
        self.made += 1
        directory = self.tmp / f"a{self.made}"
        directory.mkdir()
        archive = make_tar(directory / name, {"next.sh": f"echo {self.made}\n".encode()})
        return self.queue.add_entry("af2017", owner, False, hashlib.sha256(archive.read_bytes()).hexdigest(),
                                    name, archive)

    def finish(self, entry_id: int, stage: str, status: str, message: str, **kw) -> None:
        self.queue.claim_next(only=entry_id)
        run = self.queue.start_stage(entry_id, stage, 0)
        self.queue.finish_stage(run, status, message, {}, **kw)


def assert_escaped(proc: subprocess.CompletedProcess, *shown: str) -> str:
    both = proc.stdout + proc.stderr
    for raw in RAW:
        assert raw not in both, (raw, both)
    text = both.decode()
    for words in shown:
        assert words in text, (words, text)
    return text


@pytest.fixture
def home(tmp_path):
    return Home(tmp_path)


def test_reports_status_boards_and_rescore_lines_show_escapes(home):
    failed = home.submit()
    home.finish(failed, "prep", "failed", f"setup.sh failed (exit status 1). Entry not scored.\n"
                                          f"--- setup.sh output ---\n{OUTPUT}\n", reason="setup-error",
                outcome="failed")
    (home.site.layout.results_of(failed, make=True).directory / "prep.log").write_text(OUTPUT)
    scored = home.submit(owner=OWNER + "2")
    home.finish(scored, "score", "scored", "Scores: score 0.5", outcome="scored", scores={"score": 0.5})
    home.submit(owner=OWNER + "3")  # left queued, for `status`
    owner, archive = "\\x1b]0;pwned\\x07mallory", "x\\x1b[2J-entry.tar.gz"
    output = "\\x1b[31mred\\x1b[0m \\x9b2J c1 \\u202eevil\\u202c done\\r\\x7f"

    assert_escaped(home.run("show", str(failed)), f"({archive}) for af2017 by {owner}", output)
    assert_escaped(home.run("show", str(failed), "--organiser"), output, json.dumps(OUTPUT)[1:-1])  # the log: JSON
    assert_escaped(home.run("status"), f"queued   prep   af2017           {owner}3")
    assert_escaped(home.run("leaderboard", "af2017"), f"{scored:>6}  {owner}2")
    assert_escaped(home.run("rescore", "af2017", "--entries", str(failed)), f"entry {failed} ({owner}): not done")


def test_json_output_is_escaped_and_keeps_the_text_intact(home):
    entry_id = home.submit()
    home.finish(entry_id, "prep", "failed", OUTPUT, reason="setup-error", outcome="failed")
    for args in (("show", str(entry_id), "--json"), ("status", "--json"), ("rescore", "af2017", "--entries",
                                                                             str(entry_id), "--json")):
        proc = home.run(*args)
        assert_escaped(proc)
        doc = json.loads(proc.stdout)
        if args[0] == "show":
            assert doc["owner"] == OWNER and OUTPUT in doc["report"]


def test_error_messages_quoting_a_name_are_escaped(home, tmp_path):
    bad = make_tar(tmp_path / "\x1b[2J.tar.gz", {"next.sh": b"true\n"})
    proc = home.run("submit", "af2017", str(bad), "--owner", "bob")
    assert proc.returncode == 1
    assert_escaped(proc, "vmjudge: The archive name '\\x1b[2J.tar.gz' is not allowed")
    proc = home.run("leaderboard", "\x1b]0;x\x07")  # an unknown challenge, named in the error
    assert proc.returncode == 1
    assert_escaped(proc, "vmjudge: no challenge named")
    proc = home.run("\x1b[2Jshow")  # click's own usage error quotes the command given
    assert proc.returncode == 2
    assert_escaped(proc, "No such command")
