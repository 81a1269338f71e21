"""The portal in a real browser, with real VMs: `vmjudge web` as a command, Debian's chromium
driven by selenium, the real daemon judging what was uploaded through the form.

Three af2017 entries go in through the upload form: a good one whose next.sh prints a marker
in stage 3 (only for test records, whose names start with B), one whose model file's data is
damaged (which no header shows, so upload takes it and prep fails it on the host), and a dry
run. After `vmjudge daemon --until-idle`, "my entries" shows
the three verdicts by its own refresh (no reload), the board shows the good entry, each report
page shows its stages as steps with bars of what they used, the scored one is saved as a
screenshot, and axe-core finds no serious or critical violation on these pages at a desktop's
and a phone's width (#38). Then no participant page or API answer holds the marker, while the
organiser's log page does (so the check cannot pass by the marker never having been printed).
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.select import Select
from selenium.webdriver.support.ui import WebDriverWait

from .cli import REPO, run_cli
from .hostile.cases import damage_lzma_member
from .test_pipeline import archive
from .test_web_accessibility import checked, said
from .waiting import wait_for
from .web_process import free_port, listening, signed_in_client

pytestmark = pytest.mark.timeout(1500)
AF2017 = REPO / "examples" / "af2017"
SCREENSHOT = Path("/var/tmp/vmjudge-test/web-report.png")
MARKER = "VMJ-MARKER-7f3c9a1e-EXAM-ONLY"


def browser() -> webdriver.Chrome:
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1200,900"):
        options.add_argument(arg)
    return webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))


def damaged_entry(root: Path) -> Path:
    """af2017's good entry as a zip with a model file whose LZMA stream is damaged past its header: the archive
    passes every check at upload (they read headers and the scripts' first bytes), and stage 1, unpacking it on
    the host, fails it as bad-archive."""
    out = root / "alice-damaged-entry.zip"
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for path in sorted((AF2017 / "entries" / "good").iterdir()):
            z.write(path, path.name)
        z.writestr("model.bin", random.Random(7).randbytes(60_000) * 3, compress_type=zipfile.ZIP_LZMA)
    return damage_lzma_member(out, "model.bin")


def marked_entry(root: Path) -> Path:
    entry = root / "good"
    shutil.copytree(AF2017 / "entries" / "good", entry)
    next_sh = entry / "next.sh"
    next_sh.write_text(next_sh.read_text() + f'case "$1" in B*) echo "{MARKER} out"; echo "{MARKER} err" >&2;; esac\n')
    return archive(entry, root / "alice-good-entry.tar.gz")


@pytest.fixture
def portal(site, image, conn):
    home = Path(tempfile.mkdtemp(prefix="web-", dir=site.home))
    os.chmod(home, 0o711)
    (home / "images").symlink_to(site.layout.images)  # share the test image cache
    for args in (("challenge", "add", str(AF2017)),):
        proc = run_cli(*args, home=home)
        assert proc.returncode == 0, proc.stderr
    tokens = {name: run_cli("owner", "add", name, *extra, home=home).stdout.strip()
              for name, extra in (("alice", ()), ("olga", ("--organiser",)))}
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "vmjudge.cli", "web", "--listen", f"127.0.0.1:{port}",
                               "--no-secure-cookies"], cwd=REPO, env={**os.environ, "VMJUDGE_HOME": str(home)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: listening(port, server, lambda: server.stderr.read() if server.stderr else ""), 60,
                 "vmjudge web listening on its port")
        yield home, f"http://127.0.0.1:{port}", tokens
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(home)


def upload_through_the_form(driver: webdriver.Chrome, base: str, path: Path) -> int:
    driver.get(base + "/upload")
    Select(driver.find_element(By.ID, "challenge")).select_by_value("af2017")
    driver.find_element(By.ID, "archive").send_keys(str(path))
    driver.find_element(By.ID, "submit").click()
    WebDriverWait(driver, 60).until(lambda d: d.find_elements(By.ID, "entry-id"))
    return int(driver.find_element(By.ID, "entry-id").text)


def steps_shown(driver: webdriver.Chrome) -> dict[str, str | None]:
    """The report page's stages as steps: each one's id and status."""
    return {li.get_attribute("id"): li.get_attribute("data-status")
            for li in driver.find_elements(By.CSS_SELECTOR, "#steps li.step")}


def test_a_participant_uploads_follows_and_reads_in_a_real_browser(portal, tmp_path):
    home, base, tokens = portal
    good = marked_entry(tmp_path)
    failing = damaged_entry(tmp_path)
    dry = archive(AF2017 / "entries" / "dryrun", tmp_path / "alice-dryrun-entry.tar.gz")
    driver = browser()
    try:
        driver.get(base + "/signin")
        driver.find_element(By.ID, "token").send_keys(tokens["alice"])
        driver.find_element(By.ID, "signin").click()
        WebDriverWait(driver, 30).until(lambda d: d.current_url.endswith("/entries"))
        good_id = upload_through_the_form(driver, base, good)
        failing_id = upload_through_the_form(driver, base, failing)
        dry_id = upload_through_the_form(driver, base, dry)

        driver.get(base + "/entries")
        assert "queued" in driver.find_element(By.CSS_SELECTOR, f"#entry-{good_id} td.state").text
        daemon = run_cli("daemon", "--until-idle", home=home)
        assert daemon.returncode == 0, daemon.stderr

        def verdicts(d: webdriver.Chrome) -> bool:  # the page's own refresh, no reload
            good_v = d.find_element(By.CSS_SELECTOR, f"#entry-{good_id} td.verdict").text
            failing_v = d.find_element(By.CSS_SELECTOR, f"#entry-{failing_id} td.verdict").text
            dry_v = d.find_element(By.CSS_SELECTOR, f"#entry-{dry_id} td.verdict").text
            return (good_v, failing_v, dry_v) == ("Entry scored.", "Entry not scored (prep: bad-archive).",
                                                  "Dry run completed.")

        WebDriverWait(driver, 60).until(verdicts)
        assert driver.find_element(By.CSS_SELECTOR, f"#entry-{good_id} td.score").text == "1.0000"

        driver.get(base + "/leaderboards/af2017")
        rows = driver.find_elements(By.CSS_SELECTOR, "#leaderboard tbody tr")
        assert len(rows) == 1 and rows[0].find_element(By.CSS_SELECTOR, "td.entry").text == str(good_id)
        assert rows[0].find_element(By.CSS_SELECTOR, "td.owner").text == "alice"

        driver.get(f"{base}/entries/{good_id}")
        assert steps_shown(driver) == dict.fromkeys(("step-prep", "step-quiz", "step-exam", "step-score"), "passed")
        assert driver.find_element(By.ID, "verdict").text == "Entry scored."
        # What the run used, as bars of their limits: the exam's in tenths of its caps only.
        assert driver.find_elements(By.CSS_SELECTOR, "#step-prep meter")
        assert driver.find_elements(By.CSS_SELECTOR, "#step-quiz meter")
        assert [m.get_attribute("max") for m in driver.find_elements(By.CSS_SELECTOR, "#step-exam meter")] == ["10"] * 2
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        assert driver.save_screenshot(str(SCREENSHOT))
        # The failed entry: prep failed on the host (no VM ran, so no bar), nothing after it ran.
        driver.get(f"{base}/entries/{failing_id}")
        assert steps_shown(driver) == {"step-prep": "failed", "step-quiz": "not-run", "step-exam": "not-run",
                                       "step-score": "not-run"}
        assert "bad-archive" in driver.find_element(By.ID, "step-prep").text
        assert not driver.find_elements(By.CSS_SELECTOR, "#steps meter")
        # The dry run: prep and its quiz ran in VMs, with their bars; the exam and score did not.
        driver.get(f"{base}/entries/{dry_id}")
        assert steps_shown(driver) == {"step-prep": "passed", "step-quiz": "dry-run", "step-exam": "not-run",
                                       "step-score": "not-run"}
        assert driver.find_element(By.ID, "verdict").text == "Dry run completed."
        assert driver.find_elements(By.CSS_SELECTOR, "#step-prep meter")
        assert driver.find_elements(By.CSS_SELECTOR, "#step-quiz meter")
        assert not driver.find_elements(By.CSS_SELECTOR, "#step-exam meter, #step-score meter")
        reports = {f"{kind} report": f"/entries/{i}" for kind, i in (("scored", good_id), ("failed", failing_id),
                                                                       ("dry-run", dry_id))}
        found = checked(driver, base, {"my entries": "/entries", "board": "/leaderboards/af2017", **reports})
        assert not found, said(found)
        driver.get(f"{base}/entries/{good_id}?format=text")  # the text of `vmjudge show`, as before #38
        report = driver.find_element(By.TAG_NAME, "body").text
        assert "Entry scored." in report
        assert "Resources: setup.sh " in report and "Resources: slowest training record " in report
        assert "Resources (the exam gives tenths of its caps only): time " in report
    finally:
        driver.quit()

    # Every participant page and API answer about the good entry, without the marker...
    alice = signed_in_client(base, tokens["alice"])
    bearer = {"Authorization": f"Bearer {tokens['alice']}"}
    seen = {path: alice.get(path) for path in ("/entries", f"/entries/{good_id}", "/entries.json", "/leaderboards",
                                               "/leaderboards/af2017", "/leaderboards/af2017?late=1", "/upload")}
    seen |= {path: alice.get(path, headers=bearer) for path in ("/api/entries", f"/api/entries/{good_id}")}
    for path, response in seen.items():
        assert response.status_code == 200, path
        assert MARKER not in response.text, path
    assert seen[f"/api/entries/{good_id}"].json()["outcome"] == "scored"
    # ...and the organiser's log page with it: the entry did print it in stage 3.
    olga = signed_in_client(base, tokens["olga"])
    logs = olga.get(f"/organiser/entries/{good_id}/logs")
    assert logs.status_code == 200 and MARKER in logs.text and "exam.log" in logs.text
    assert alice.get(f"/organiser/entries/{good_id}/logs").status_code == 404
