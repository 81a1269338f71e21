"""#58's acceptance in a real browser: a newcomer signs up, confirms the address from the mail a real
SMTP server received (sent by the daemon's own sender), is approved by the organisers, signs in by a
mailed link, makes a team, reads the challenge page, downloads the training set and the sample entry,
uploads an archive made around its folder (refused with the sentence, no pending place taken), then
the sample as it came, and sees it on the board as their team. Every page on the way is checked by
axe-core. Debian's chromium, a real `vmjudge web` process; the entry is judged through the queue's own
calls (no VM here: the replica's download, which needs the judge's image, is checked in a real VM run
in tests/test_replica.py).
"""

from __future__ import annotations

import hashlib
import io
import re
import shutil
import tarfile
import time
from pathlib import Path

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from vmjudge.config import load_challenge
from vmjudge.replica.build import training_files
from vmjudge.supervisor.notifier import Notifier

from .notify_servers import SmtpServer
from .test_notify_confirm import PORTAL_URL, drain, mail_text, notify_toml
from .test_participant_view import judge
from .test_web_abuse import with_site
from .test_web_accessibility import axe_violations, driver  # noqa: F401 - the browser fixture
from .web_home import WebHome
from .web_process import running_portal

pytestmark = pytest.mark.timeout(600)
REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "af2017"
LINK = re.compile(re.escape(PORTAL_URL) + r"(/[a-z/]+\?token=[A-Za-z0-9_.=-]+)")


def mailed_link(web, address: str) -> str:
    drain(web.notifier)
    found = LINK.search(mail_text(web.smtp.mailbox.to(address)[-1]))
    assert found, mail_text(web.smtp.mailbox.to(address)[-1])
    return found.group(1)


def click(chrome, element_id: str, until: str) -> None:
    chrome.find_element(By.ID, element_id).click()
    WebDriverWait(chrome, 30).until(lambda d: until in d.page_source)


def session_client(chrome, base: str) -> httpx.Client:
    """An HTTP client with the browser's session: what a download link gives the browser."""
    return httpx.Client(base_url=base, timeout=60, cookies={c["name"]: c["value"] for c in chrome.get_cookies()})


def test_a_newcomer_signs_up_reads_the_page_downloads_uploads_and_sees_their_team_on_the_board(
        tmp_path, driver):  # noqa: F811 - the browser fixture imported above
    chrome = driver
    with SmtpServer() as server:
        web = with_site(WebHome(tmp_path), notify_toml(server.port) + '[portal]\nregistration = "approve"\n')
        web.smtp, web.notifier = server, Notifier(web.site, web.queue)
        directory = tmp_path / "af2017"
        shutil.copytree(EXAMPLE, directory)
        toml = directory / "challenge.toml"
        toml.write_text(toml.read_text().replace("replica = true", "replica = false\nteam_size = 3"))
        web.register("af2017", directory)
        with running_portal(web.home, tmp_path / "web.log") as portal:
            base, violations = portal.base, {}

            def visit(path: str, name: str) -> None:
                chrome.get(base + path)
                violations[name] = axe_violations(chrome)

            chrome.delete_all_cookies()
            visit("/", "home")
            assert "af2017" in chrome.page_source
            visit("/signup", "sign-up")
            chrome.find_element(By.ID, "name").send_keys("ana-lab")
            chrome.find_element(By.ID, "email").send_keys("ana@example.org")
            click(chrome, "signup", "A link is on its way to ana@example.org")
            visit(mailed_link(web, "ana@example.org"), "confirmation")
            click(chrome, "confirm", "The organisers approve each new account")
            assert web.vmjudge("owner", "approve", "ana-lab").returncode == 0
            visit("/signin", "sign-in")
            chrome.find_element(By.ID, "link-email").send_keys("ana@example.org")
            click(chrome, "mail-link", "If an account uses that address")
            visit(mailed_link(web, "ana@example.org"), "sign-in link")
            chrome.find_element(By.ID, "signin-link").click()
            WebDriverWait(chrome, 30).until(lambda d: d.current_url.endswith("/entries"))
            visit("/teams", "teams")
            chrome.find_element(By.ID, "team-name").send_keys("heartbeat")
            click(chrome, "make-team", "<strong>heartbeat</strong> in")
            visit("/challenges/af2017", "challenge page")
            page = chrome.page_source
            assert "af2017 — AF classification" in page and "What your entry runs on" in page
            assert "Scorer af2017, higher first" in page
            # The downloads, with the browser's session.
            client = session_client(chrome, base)
            training = client.get("/challenges/af2017/download/training")
            assert training.status_code == 200
            assert training.headers["x-content-sha256"] == hashlib.sha256(training.content).hexdigest()
            with tarfile.open(fileobj=io.BytesIO(training.content)) as tar:
                got = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
            assert got == {n: p.read_bytes() for n, p in training_files(load_challenge(directory)).items()}
            chrome.get(base + "/challenges/af2017")
            assert training.headers["x-content-sha256"] in chrome.page_source
            sample = client.get("/challenges/af2017/download/sample")
            good = tmp_path / "af2017-sample-entry.tar.gz"
            good.write_bytes(sample.content)
            # An archive made around its folder: refused at upload with the way to fix it, nothing queued.
            around = tmp_path / "around-entry.tar.gz"
            with tarfile.open(fileobj=io.BytesIO(sample.content)) as tar, tarfile.open(around, "w:gz") as out:
                for member in tar.getmembers():
                    data = tar.extractfile(member).read()
                    member.name = f"sample/{member.name}"
                    out.addfile(member, io.BytesIO(data))
            visit("/upload", "upload")
            Select(chrome.find_element(By.ID, "challenge")).select_by_value("af2017")
            chrome.find_element(By.ID, "archive").send_keys(str(around))
            click(chrome, "submit", "inside the folder sample/")
            assert "cd sample &amp;&amp; tar czf ../entry.tar.gz ." in chrome.page_source
            assert web.queue.entries() == [] and web.queue.owner_usage("af2017", "heartbeat", False, None).waiting == 0
            visit("/upload", "upload again")
            Select(chrome.find_element(By.ID, "challenge")).select_by_value("af2017")
            chrome.find_element(By.ID, "archive").send_keys(str(good))
            click(chrome, "submit", "Entry")
            [entry] = web.queue.entries()
            assert entry.owner == "heartbeat"
            judge(web.queue, entry.id)
            with web.queue.database.transaction() as db:
                db.execute("UPDATE entries SET published = ?", (time.time() - 1,))
            visit("/leaderboards/af2017", "board")
            row = chrome.find_element(By.ID, "my-row").text
            assert "heartbeat" in row and "(your team)" in row
    assert not [f"{page}: {v}" for page, found in violations.items() for v in found]
