"""#38's acceptance in a real browser, without a VM: a real `vmjudge web` process over a home whose
entries are judged through the queue's own calls (as test_web_pages.py does: a scored, a failed and
a dry-run entry, a board with history, a contest's phases), Debian's chromium driven by selenium.

axe-core (the copy selenium-axe-python ships) checks every participant and organiser page, at the
desktop's width and a phone's, for violations of impact serious or critical. It goes in through
WebDriver's execute_script, which runs in the page by the DevTools protocol: the portal's CSP
(`default-src 'none'`, scripts only from the portal) does not apply to it, and the test checks that
axe did run (its version and the rules it passed), and that it does fail a page made inaccessible.
What axe cannot judge of keyboard use is tried with the keyboard: Tab through a page's controls.

Screenshots at 1280 and 375 px wide of the pages participants read (VMJUDGE_SCREENSHOTS=docs/screenshots: for
the participants' guide); at 375 px no page may scroll sideways.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait
from selenium_axe_python import Axe

from .needs import cannot_run
from .phased import contest_dir
from .test_web_pages import judged
from .web_home import WebHome
from .web_process import Portal, running_portal

pytestmark = pytest.mark.timeout(900)
WIDTHS = (1280, 375)
SERIOUS = ("serious", "critical")
PHONE_SLACK = 2  # px: sub-pixel rounding, not a page wider than the phone


class Site:
    """The portal's process, the home behind it, and the entries each page shows."""

    def __init__(self, portal: Portal, web: WebHome, tokens: dict[str, str], ids: dict[str, int]):
        self.portal, self.web, self.tokens, self.ids = portal, web, tokens, ids


def fixed_times(web: WebHome) -> None:
    """Every time a page shows, set to a fixed one per entry, so that the screenshots come out the
    same on every run and only change when a page does."""
    with web.queue.database.transaction() as db:
        for eid, in db.execute("SELECT id FROM entries").fetchall():
            day = f"2026-11-{eid:02d}T10:00:00Z"
            db.execute("UPDATE entries SET submitted_at = ? WHERE id = ?", (day, eid))
            db.execute("UPDATE scorings SET at = ? WHERE entry_id = ?", (day.replace("10:", "11:"), eid))
            db.execute("UPDATE stage_runs SET started_at = ?, finished_at = CASE WHEN finished_at IS NULL THEN NULL "
                       "ELSE ? END WHERE entry_id = ?", (day.replace("10:", "10:1"), day.replace("10:", "10:4"), eid))
            db.execute("UPDATE events SET at = ? WHERE entry_id = ?", (day.replace("10:", "10:3"), eid))


def judged_home(root: Path) -> tuple[WebHome, dict[str, int]]:
    """The entries of a small contest's history: bob and carol ahead and behind, alice's scored,
    failed and dry-run entries, one being examined, one queued, one running for the organiser's
    queue, and one whose first attempt failed on the host (its timeline)."""
    web = WebHome(root)
    ids = {}
    for i, (owner, score) in enumerate([("bob", 0.61), ("alice", 0.52), ("carol", 0.47), ("alice", 0.44),
                                        ("bob", 0.74), ("carol", 0.69), ("alice", 0.9)]):
        ids[f"scored-{i}"] = judged(web, "scored", owner, score)
    ids["scored"] = ids["scored-6"]
    for kind in ("failed", "dry-run", "examined"):
        ids[kind] = judged(web, kind)
    q = web.queue
    ids["queued"] = q.add_entry("big", "alice", False, "a" * 64, "next-entry.tar.gz", web.tar("next.tar.gz"))
    ids["running"] = q.add_entry("big", "carol", False, "a" * 64, "carol-entry.tar.gz", web.tar("carol.tar.gz"))
    q.claim_next(only=ids["running"])
    q.start_stage(ids["running"], "prep", 1)
    ids["retried"] = q.add_entry("big", "bob", False, "a" * 64, "bob-entry.tar.gz", web.tar("bob.tar.gz"))
    q.claim_next(only=ids["retried"])
    q.infra_failure(q.start_stage(ids["retried"], "prep", 0), "vm-start", "the VM did not start", {})
    q.add_challenge("contest", contest_dir(root), "key")
    fixed_times(web)
    return web, ids


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[Site]:
    root = tmp_path_factory.mktemp("axe")
    web, ids = judged_home(root)
    tokens = {"alice": web.owners.add("alice"), "olga": web.owners.add("olga", True)}
    with running_portal(web.home, root / "web.log") as portal:
        yield Site(portal, web, tokens, ids)


@pytest.fixture(scope="module")
def driver() -> Iterator[webdriver.Chrome]:
    for tool in ("/usr/bin/chromium", "/usr/bin/chromedriver"):
        if not os.access(tool, os.X_OK):
            cannot_run(f"{tool} is missing (make setup installs chromium and chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,900",
                "--hide-scrollbars", "--force-color-profile=srgb", "--font-render-hinting=none"):
        options.add_argument(arg)
    chrome = webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))
    chrome.set_script_timeout(120)
    try:
        yield chrome
    finally:
        chrome.quit()


def width(driver: webdriver.Chrome, px: int) -> None:
    """The page laid out as on a screen `px` wide: a phone's (touch, its viewport meta read) below
    600 px. Emulation, since a headless window has a minimum width of its own."""
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": px, "height": 900, "deviceScaleFactor": 1, "mobile": px < 600})


def sign_in(driver: webdriver.Chrome, site: Site, who: str) -> None:
    driver.delete_all_cookies()
    driver.get(site.portal.base + "/signin")
    driver.find_element(By.ID, "token").send_keys(site.tokens[who])
    driver.find_element(By.ID, "signin").click()
    WebDriverWait(driver, 30).until(lambda d: d.current_url.endswith("/entries"))


def axe_violations(driver: webdriver.Chrome) -> list[str]:
    """axe-core's serious and critical violations on the page shown, one line each: the rule and
    the elements. Fails if axe did not run (blocked, or no rule checked)."""
    axe = Axe(driver)
    axe.inject()
    assert driver.execute_script("return typeof axe === 'object' && axe.version"), "axe-core was not injected"
    results = axe.run()
    assert results["passes"], "axe-core checked no rule"
    return [f"{v['id']} ({v['impact']}): {v['help']}: " + ", ".join(str(n["target"]) for n in v["nodes"])
            for v in results["violations"] if v["impact"] in SERIOUS]


def said(found: dict[str, list[str]]) -> str:
    return "\n".join(f"{page}: {line}" for page, lines in found.items() for line in lines)


def participant_pages(site: Site) -> dict[str, str]:
    ids = site.ids
    return {"my entries": "/entries", "scored report": f"/entries/{ids['scored']}",
            "failed report": f"/entries/{ids['failed']}", "dry-run report": f"/entries/{ids['dry-run']}",
            "report being examined": f"/entries/{ids['examined']}", "upload": "/upload",
            "leaderboards": "/leaderboards", "leaderboard": "/leaderboards/big",
            "late board": "/leaderboards/big?late=1", "phases": "/phases/contest", "settings": "/settings"}


def organiser_pages(site: Site) -> dict[str, str]:
    ids = site.ids
    return {"all entries": "/organiser/entries", "all entries filtered": "/organiser/entries?owner=alice&state=done",
            "attempts": f"/organiser/entries/{ids['retried']}", "scored entry": f"/organiser/entries/{ids['scored']}",
            "logs": f"/organiser/entries/{ids['scored']}/logs", "queue now": "/organiser/queue",
            "parked": "/organiser/parked"}


def checked(driver: webdriver.Chrome, base: str, pages: dict[str, str]) -> dict[str, list[str]]:
    """Each page's serious and critical violations at each width, and at a phone's whether the
    page scrolls sideways (none of either, when it passes). `base`: the portal's URL."""
    found = {}
    for px in WIDTHS:
        width(driver, px)
        for name, path in pages.items():
            driver.get(base + path)
            assert driver.find_elements(By.TAG_NAME, "h1"), f"{name} did not load: {driver.page_source[:300]}"
            violations = axe_violations(driver)
            if px < 600 and (wide := page_size(driver)[0]) > px + PHONE_SLACK:
                violations.append(f"scrolls sideways: {wide} px wide")
            if violations:
                found[f"{name} at {px} px"] = violations
    return found


def test_axe_core_finds_nothing_serious_on_the_participants_pages(served, driver):
    site = served
    driver.delete_all_cookies()
    found = checked(driver, site.portal.base, {"sign-in": "/signin"})
    sign_in(driver, site, "alice")
    found |= checked(driver, site.portal.base, participant_pages(site))
    assert not found, said(found)


def test_axe_core_finds_nothing_serious_on_the_organisers_pages(served, driver):
    site = served
    sign_in(driver, site, "olga")
    found = checked(driver, site.portal.base, organiser_pages(site))
    assert not found, said(found)


def test_axe_core_runs_under_the_portals_csp_and_fails_a_page_made_inaccessible(served, driver):
    """The check is not vacuous: the CSP is the portal's own, and axe-core, given the sign-in page
    with its token field's label taken away and its text made pale, reports both."""
    site = served
    width(driver, 1280)
    driver.delete_all_cookies()
    driver.get(site.portal.base + "/signin")
    blocked = driver.execute_script(
        "const s = document.createElement('script'); s.textContent = 'window.inlineRan = 1';"
        "document.head.appendChild(s); return window.inlineRan === undefined;")
    assert blocked, "the page's CSP let an inline script run"
    driver.execute_script("document.querySelector('label[for=token]').remove();"
                          "document.querySelector('main').insertAdjacentHTML('beforeend', "
                          "'<p><font color=\"#dddddd\">pale text on white</font></p>')")
    rules = {line.split(" ")[0] for line in axe_violations(driver)}
    assert {"label", "color-contrast"} <= rules, rules


CONTROLS = ("return [...document.querySelectorAll('a[href], button, summary, input:not([type=hidden]), select, "
            "[tabindex=\"0\"]')].filter(e => e.checkVisibility())")
FOCUSED = ("const e = document.activeElement, s = getComputedStyle(e);"
           "return [e, s.outlineStyle !== 'none' && s.outlineWidth !== '0px'];")


def test_tab_reaches_every_control_in_order_and_shows_where_the_focus_is(served, driver):
    """Keyboard use, which axe-core cannot judge: from the top of a page, Tab goes through each link,
    button, field, disclosure and scrolling box in the page's order, and each shows a focus ring."""
    site = served
    sign_in(driver, site, "alice")
    for px, path in ((1280, f"/entries/{site.ids['scored']}"), (375, "/leaderboards/big"), (1280, "/upload"),
                     (375, "/entries")):
        width(driver, px)
        driver.get(site.portal.base + path)
        controls = driver.execute_script(CONTROLS)
        assert len(controls) > 5, path
        reached = []
        for _ in controls:
            ActionChains(driver).send_keys(Keys.TAB).perform()  # as a key press, not into a field
            element, ring = driver.execute_script(FOCUSED)
            assert ring, f"{path} at {px} px: no focus ring on {element.get_attribute('outerHTML')[:120]}"
            reached.append(element)
        assert reached == controls, (path, px)


def page_size(driver: webdriver.Chrome) -> tuple[int, int]:
    return driver.execute_script("const e = document.documentElement; return [e.scrollWidth, e.scrollHeight];")


def screenshot(driver: webdriver.Chrome, px: int, path: Path) -> None:
    """The whole page at `px` wide, cropped to its content (the viewport's empty rest left out): a
    PNG from the DevTools protocol."""
    height = driver.execute_script("return Math.ceil(document.body.getBoundingClientRect().height) + 16")
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True,
        "clip": {"x": 0, "y": 0, "width": px, "height": height, "scale": 1}})
    path.write_bytes(base64.b64decode(shot["data"]))


def test_screenshots_at_1280_and_375_px_and_no_sideways_scrolling_on_a_phone(served, driver, tmp_path):
    """Into a directory of the test's; with VMJUDGE_SCREENSHOTS=docs/screenshots, the docs' own (another
    machine's fonts give other bytes, so a run of the suite leaves the tree as it was)."""
    site = served
    shots = Path(os.environ.get("VMJUDGE_SCREENSHOTS", tmp_path))
    sign_in(driver, site, "alice")
    ids = site.ids
    pages = {"my-entries": "/entries", "report-scored": f"/entries/{ids['scored']}",
             "report-failed": f"/entries/{ids['failed']}", "report-dry-run": f"/entries/{ids['dry-run']}",
             "leaderboard": "/leaderboards/big"}
    shots.mkdir(exist_ok=True)
    wide = {}
    for px in WIDTHS:
        width(driver, px)
        for name, path in pages.items():
            driver.get(site.portal.base + path)
            assert driver.execute_script("return window.innerWidth") == px
            scroll_width, _ = page_size(driver)
            if px == 375:
                wide[name] = scroll_width
            target = shots / f"{name}-{px}.png"
            screenshot(driver, px, target)
            png = target.read_bytes()
            assert png.startswith(b"\x89PNG") and int.from_bytes(png[16:20], "big") == px
    assert all(w <= 375 + PHONE_SLACK for w in wide.values()), wide
