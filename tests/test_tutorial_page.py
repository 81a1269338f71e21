"""docs/tutorial.md checked on the host, without a VM (test_tutorial.py runs the whole page in VMs):
the blocks are found as the VM test finds them, the comparison fails on a changed output, every
`vmjudge` command on the page parses with its options, and what the page shows that needs no VM is
what this checkout prints: `challenge new`'s output, and the leaderboards and `rescore` lines as the
code formats the sample's scores under af2017 and accuracy (the sample's exam run here as the stages
run it, test_challenge_new.run_records)."""

from __future__ import annotations

import shlex
import subprocess

from click.testing import CliRunner

from vmjudge.archive.names import check_archive_name
from vmjudge.archive.unpack import unpack
from vmjudge.cli.main import main
from vmjudge.config import load_challenge
from vmjudge.reports import leaderboard as lb
from vmjudge.stages.score.scoring import ScoringRules
from vmjudge.supervisor.rescore import EntryOutcome, RescoreReport

from .test_challenge_new import run_records
from .tutorial_page import PAGE, Step, command_dir, difference, normalise, steps


def page() -> list[Step]:
    return steps(PAGE.read_text())


def vmjudge_lines(step: Step) -> list[list[str]]:
    return [shlex.split(line, comments=True)[1:] for line in step.commands.splitlines() if line.startswith("vmjudge ")]


def test_the_page_has_its_eight_steps_and_six_outputs_in_order():
    found = page()
    firsts = [vmjudge_lines(s)[0][:2] for s in found]
    assert firsts == [["challenge", "new"], ["challenge", "add"], ["submit", "first"], ["daemon", "--slots"],
                      ["show", "1"], ["leaderboard", "first"], ["rescore", "first"], ["leaderboard", "first"]]
    assert [s.expected is not None for s in found] == [True, True, True, False, False, True, True, True]


def test_a_changed_output_fails_the_comparison_and_the_placeholders_stand_for_what_varies(tmp_path):
    board = page()[5]
    assert board.expected is not None and difference(board, board.expected, tmp_path) is None
    printed = board.expected.replace("1.0000", "0.7500", 1)
    assert difference(board, printed, tmp_path) is not None
    assert difference(board, board.expected + "\n", tmp_path) is not None  # not even a blank line more
    said = f"wrote {tmp_path}/x at 2026-11-27T01:42:31Z after 12.5 s\n"
    assert normalise(said, tmp_path) == "wrote <HOME>/x at <TIME> after <SECONDS>\n"


def test_a_text_block_anywhere_but_after_an_sh_block_is_refused():
    for text in ("```text\nx\n```\n", "```sh\na\n```\nwords\n```text\nx\n```\n", "```python\nx\n```\n"):
        try:
            steps(text)
        except ValueError:
            continue
        raise AssertionError(f"accepted: {text!r}")


def test_every_vmjudge_command_on_the_page_parses_with_its_options():
    """Each command line with --help added: click refuses an unknown command or option before it
    prints the help, so a renamed option fails here rather than only in the VM test."""
    for step in page():
        for args in vmjudge_lines(step):
            done = CliRunner().invoke(main, [*args, "--help"])
            assert done.exit_code == 0, (args, done.output)


def test_what_the_page_shows_without_a_vm_is_what_this_checkout_prints(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    env = {"PATH": f"{command_dir(tmp_path / 'tools')}:/usr/bin:/bin", "VMJUDGE_HOME": str(tmp_path / "home")}
    found = page()
    first = found[0]
    done = subprocess.run(["bash", "-e", "-c", first.commands], cwd=work, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and difference(first, done.stdout, tmp_path / "home") is None, done

    challenge = work / "first"
    ch = load_challenge(challenge)
    archive = challenge / "entries" / "sample-entry.tar.gz"
    unpack(archive, check_archive_name(archive.name), tmp_path / "entry")  # prep's unpacker
    exam = run_records(ch, tmp_path / "entry", "test", tmp_path / "exam")
    before = ScoringRules.load(ch.scorer, ch.reference_dir, ch.score_options)

    rescore = found[6]
    for line in rescore.commands.splitlines():  # the page's own edit of challenge.toml
        if not line.startswith("vmjudge "):
            subprocess.run(["bash", "-e", "-c", line], cwd=work, env=env, check=True, timeout=60)
    ch = load_challenge(challenge)
    assert (before.scorer, ch.scorer) == ("af2017", "accuracy")
    after = ScoringRules.load(ch.scorer, ch.reference_dir, ch.score_options)

    def board(rules: ScoringRules) -> str:
        scores = rules.function(exam, ch.reference_dir)
        return lb.as_text("first", [lb.Row(rank=1, owner="ada", entry_id=1, score=scores["score"], submitted_at="",
                                           scores=scores, exam_host=None, exam_hardware=None)])

    assert (board(before), board(after)) == (found[5].expected, found[7].expected)
    outcome = EntryOutcome(entry_id=1, status="rescored", owner="ada", late=False,
                           old=before.function(exam, ch.reference_dir), new=after.function(exam, ch.reference_dir))
    report = RescoreReport("first", "rescore", None, after.scorer, after.scorer_version, str(after.reference),
                           after.reference_sha256, [outcome])
    assert f"{outcome.line()}\n{report.summary()}\n" == rescore.expected
