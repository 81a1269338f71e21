"""The home's layout on disk: homes made by older versions are read by these very names, so a
rename here would lose their queue, spool, results and archived scores."""

import stat
from pathlib import Path

from vmjudge.config import Site
from vmjudge.config.layout import Layout


def test_every_path_under_home_keeps_its_name():
    home = Path("/h")
    layout = Site(home=home).layout
    assert layout == Layout(home)
    named = {layout.site_toml: "site.toml", layout.queue_db: "queue.db", layout.daemon_lock: "daemon.lock",
             layout.submit_lock: "submit.lock", layout.spool: "spool", layout.images: "images", layout.runs: "run",
             layout.results: "results", layout.archive: "archive", layout.results_store: "archive/sha256"}
    assert {path: str(path.relative_to(home)) for path in named} == named
    files = layout.results_of(7)
    named = {files.directory: ".", files.entry: "entry", files.install: "install", files.home_disk: "home.qcow2",
             files.report: "report.html", files.exam_files: "exam-files.partial",
             files.legacy_results: "exam-results.json", files.overlay("quiz"): "quiz-overlay.qcow2",
             files.stage_log("exam"): "exam.log", files.console_log("prep", 2): "console-prep-2.log",
             files.agent_log("quiz", 1): "agent-quiz-1.log", files.media("exam", 3): "exam-3.iso"}
    assert {path: str(path.relative_to(home / "results" / "7")) for path in named} == named


def test_the_home_and_an_entry_results_get_their_modes(tmp_path):
    layout = Layout(tmp_path / "home")
    layout.ensure()
    assert not (tmp_path / "home" / "results" / "7").exists()
    assert layout.results_of(7).logs() == []
    files = layout.results_of(7, make=True)
    modes = {str(p.relative_to(layout.home)): stat.S_IMODE(p.stat().st_mode) for p in layout.home.rglob("*")}
    assert modes == {"spool": 0o700, "archive": 0o700, "results": 0o711, "results/7": 0o711, "run": 0o711,
                     "images": 0o755}
    assert stat.S_IMODE(layout.home.stat().st_mode) == 0o711
    with layout.stage_run_dir(7, "prep") as rd:
        assert rd.path.parent == layout.runs and rd.path.name.startswith("e7-prep-")
        assert stat.S_IMODE(rd.path.stat().st_mode) == 0o711
        assert layout.stage_run_leftovers() == [rd.path]
    assert layout.stage_run_leftovers() == [] and not rd.path.exists()
    (files.directory / "exam.log").write_text("x")
    assert files.logs() == [files.directory / "exam.log"]
