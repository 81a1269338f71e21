"""Issue 54: what a contest phase keeps back stays back, on SQLite and on a real PostgreSQL server.

test_phases.py's contest (tests/phased.py), with a phase that gives no feedback until published
(`feedback = "none"`): its entries' verdicts, and its board's order, are the organiser's until
`vmjudge publish`. A participant asks about them in every way the portal lets them: carrying a
passed, a failed and a still-judged entry of that phase into the next one (the portal's form
and its API, on a real `vmjudge web` process, and queue.carry as the portal calls it), reading
the entry carried, the next phase's board and its own entries, the working limit of the phase
itself, and the phases page's promoted owners. Every answer must be the same whatever the
hidden verdict or place was, byte for byte where the portal answers; once the phase is
published, the answers tell again what they told before.
"""

from __future__ import annotations

import json
import re
import time
from contextlib import closing
from pathlib import Path

import httpx
import pytest

from vmjudge.config import load_challenge
from vmjudge.errors import EntryError
from vmjudge.queue.carry import carry
from vmjudge.queue.owners import Owners
from vmjudge.queue.publish import being_examined
from vmjudge.reports.report import show

from .phased import contest_toml
from .test_phases import Contest, backend, make_contest
from .web_home import CSRF
from .web_process import running_portal, signed_in_client

__all__ = ["backend"]  # the contest's queue: SQLite, then PostgreSQL (test_phases.py)

# The fates of an entry of a phase that gives no feedback: to its owner each one is "received".
FATES = ("passed", "failed", "queued", "examined")


def roomy(toml: str) -> str:
    """challenge.toml with the portal's limits per owner out of the way (these tests send many
    entries of one owner in a minute, and what they read is the phases' answers), and a scored
    limit and a VM budget that an answer at full feedback counts (the entries left, the tenths)."""
    assert "[limits]\n" in toml and "[entry]\n" in toml
    return toml.replace("[limits]\n", "[limits]\nsubmissions_per_hour = 1000\npending_per_owner = 1000\n"
                        "vm_hours = 1000\n", 1).replace("[entry]\n", "[entry]\nmax_scored_per_owner = 10\n", 1)


def hidden_contest(tmp_path: Path, backend: Path, working: int = 2) -> Contest:
    """The contest with validation giving no feedback until published (its board hidden), taking
    `working` working entries from each owner."""
    c = make_contest(tmp_path, backend)
    toml = contest_toml(validation='feedback = "none"').replace("max_working_per_owner = 2",
                                                                f"max_working_per_owner = {working}")
    (c.directory / "challenge.toml").write_text(roomy(toml))
    return c


def sanity_hidden(tmp_path: Path, backend: Path) -> Contest:
    """The contest with sanity, the phase that takes uploads, giving no feedback: validation,
    which carries from it and gives full feedback with a public board, carries entries whose
    stages 1 and 2 are sanity's own, run again."""
    c = make_contest(tmp_path, backend)
    toml = contest_toml().replace('name = "sanity"\nfeedback = "full"', 'name = "sanity"\nfeedback = "none"')
    assert 'feedback = "none"' in toml
    (c.directory / "challenge.toml").write_text(roomy(toml))
    return c


def judged(c: Contest, entries: dict[str, int]) -> None:
    """Each entry judged to its fate: passed (scored; "place" too), failed (at prep), left
    queued, or examined (scored, but its exam's publish time still to come); the examined last,
    since each judging brings every other exam's publish time."""
    for label in ("place", "passed", "failed", "examined"):
        if label in entries:
            c.judge(entries[label], fail=label == "failed", examined=label == "examined")


def validation_entries(c: Contest, owner: str, fates: tuple[str, ...] = FATES) -> dict[str, int]:
    """An entry of `owner` in validation for each fate (its sanity entry passed and carried)."""
    sanity = {fate: c.submit(owner) for fate in fates}
    for entry in sanity.values():
        c.judge(entry)
    carried = {fate: c.carry(entry, "validation") for fate, entry in sanity.items()}
    judged(c, carried)
    at = time.time()
    for fate, entry in carried.items():  # what became of each, as the organiser knows it
        row = c.queue.entry(entry)
        assert (row.state, row.outcome, being_examined(row, at)) == {
            "place": ("done", "scored", False), "passed": ("done", "scored", False),
            "failed": ("done", "failed", False), "queued": ("queued", None, False),
            "examined": ("done", "scored", True)}[fate], (fate, row)
        assert show(c.site, c.queue, entry)["state"] == "received"  # and as its owner sees it
    return carried


def portal_carry(c: Contest, entry: int, phase: str, owner: str) -> int:
    """queue.carry as the portal calls it: the owner's own entry, held to the owner's limits."""
    return carry(c.queue, "contest", load_challenge(c.directory), phase, entry, rate_limited=True,
                 owner=owner).entry_id


def portal_refusal(c: Contest, entry: int, phase: str, owner: str) -> tuple[str | None, str]:
    with pytest.raises(EntryError) as refused:
        portal_carry(c, entry, phase, owner)
    return refused.value.reason, str(refused.value)


def token(c: Contest, owner: str) -> str:
    return Owners(c.queue.database).add(owner)


def api(base: str, key: str) -> httpx.Client:
    return httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30)


def form_carry(client: httpx.Client, entry: int, phase: str) -> httpx.Response:
    """"Choose this entry for phase P" on the entry's report page, as a browser sends it."""
    page = client.get(f"/entries/{entry}")
    assert f'id="carry-{phase}"' in page.text, page.text
    found = CSRF.search(page.text)
    assert found
    return client.post(f"/entries/{entry}/carry", data={"csrf": found.group(1), "phase": phase})


def without(text: str, *numbers: int | str) -> str:
    """`text` with each of `numbers` (entry ids, owners) written as N: what is left must not differ."""
    for n in numbers:
        text = re.sub(rf"\b{re.escape(str(n))}\b", "N", text)
    return text


def test_a_refused_carry_says_the_same_of_a_passed_a_failed_and_a_still_judged_entry(tmp_path, backend):
    """alice has used test's one place; carrying any other validation entry of hers is refused
    with the quota's sentence, whatever became of that entry in validation (hidden from her):
    the checks that read nothing hidden come first, and none after them reads the verdict."""
    c = hidden_contest(tmp_path, backend, working=len(FATES) + 1)
    entries = validation_entries(c, "alice", ("place", *FATES))
    c.vmjudge("promote", "contest", "--phase", "test", "--owners", "alice")
    portal_carry(c, entries.pop("place"), "test", "alice")  # test's one place for alice
    others = entries
    assert set(others) == set(FATES)
    said = {fate: portal_refusal(c, e, "test", "alice") for fate, e in others.items()}
    assert set(said.values()) == {("phase-quota", "alice has carried 1 entry to phase test of contest, the most it "
                                                  "takes from one owner (1).")}, said
    key = token(c, "alice")
    with running_portal(c.home, tmp_path / "web.log") as portal:
        with api(portal.base, key) as client:
            answers = {fate: client.post(f"/api/entries/{e}/carry", data={"phase": "test"})
                       for fate, e in others.items()}
        assert {(a.status_code, a.content) for a in answers.values()} == {(409, json.dumps(
            {"error": said["passed"][1]}, separators=(",", ":")).encode())}, {f: a.text for f, a in answers.items()}
        with closing(signed_in_client(portal.base, key)) as browser:
            pages = {fate: form_carry(browser, e, "test") for fate, e in others.items()}
        assert len({(p.status_code, p.content) for p in pages.values()}) == 1, {f: p.text for f, p in pages.items()}
        assert pages["failed"].status_code == 409 and said["failed"][1] in pages["failed"].text


def test_a_carry_is_taken_alike_from_a_passed_a_failed_and_a_still_judged_entry_while_hidden(tmp_path, backend):
    """While validation's verdicts are hidden, any official entry of it may be carried into test:
    passing cannot be checked without telling. Each owner's carry is answered alike, through
    queue.carry, the API and the form, whatever became of the entry carried."""
    c = hidden_contest(tmp_path, backend)
    routes = ("queue", "api", "form")
    owners = {(route, fate): f"{route}-{fate}" for route in routes for fate in FATES}
    entries = {key: validation_entries(c, owner, (key[1],))[key[1]] for key, owner in owners.items()}
    c.vmjudge("promote", "contest", "--phase", "test", "--owners", ",".join(owners.values()))
    keys = {owner: token(c, owner) for (route, _), owner in owners.items() if route != "queue"}
    answers: dict[tuple[str, str], str] = {}
    for fate in FATES:
        owner, entry = owners["queue", fate], entries["queue", fate]
        admitted = carry(c.queue, "contest", load_challenge(c.directory), "test", entry, rate_limited=True,
                         owner=owner)
        answers["queue", fate] = without(repr((admitted.remaining_line(), admitted.budget_line(), admitted.phase,
                                               admitted.feedback, admitted.late, admitted.dry_run)), owner)
    with running_portal(c.home, tmp_path / "web.log") as portal:
        for fate in FATES:
            owner, entry = owners["api", fate], entries["api", fate]
            with api(portal.base, keys[owner]) as client:
                answer = client.post(f"/api/entries/{entry}/carry", data={"phase": "test"})
            assert answer.status_code == 201, answer.text
            assert (answer.json()["remaining"], answer.json()["budget"]) == (None, None)  # test: "none" for now
            answers["api", fate] = without(answer.text, answer.json()["id"], entry, owner)
            owner, entry = owners["form", fate], entries["form", fate]
            with closing(signed_in_client(portal.base, keys[owner])) as browser:
                page = form_carry(browser, entry, "test")
            assert page.status_code == 201, page.text
            new = int(page.text.split('id="entry-id">')[1].split("<")[0])
            assert c.queue.entry(new).carried_from == entry
            answers["form", fate] = without(re.sub(r'name="csrf" value="[^"]+"', "", page.text), new, owner)
    for route in routes:
        assert len({answers[route, fate] for fate in FATES}) == 1, {f: answers[route, f] for f in FATES}
    carried = [e for e in c.queue.entries(("queued",)) if e.phase == "test"]
    assert sorted(e.carried_from for e in carried) == sorted(entries.values())


def test_once_published_a_carry_tells_again_what_became_of_the_entry(tmp_path, backend):
    """After `vmjudge publish contest --phase validation`, the sentences of before issue 54:
    a failed entry did not pass, one still judged (or examined) is still being judged."""
    c = hidden_contest(tmp_path, backend)
    entries = {fate: validation_entries(c, fate, (fate,))[fate] for fate in FATES}
    c.vmjudge("promote", "contest", "--phase", "test", "--owners", ",".join(FATES))
    c.vmjudge("publish", "contest", "--phase", "validation")
    failed, queued, examined = entries["failed"], entries["queued"], entries["examined"]
    expected = {
        "failed": ("not-passed", f"entry {failed} did not pass phase validation of contest: only an entry that "
                                 "passed it can be carried into phase test."),
        "queued": ("not-passed", f"entry {queued} is still being judged in phase validation of contest: carry it "
                                 "into phase test once it has passed."),
        "examined": ("not-passed", f"entry {examined} is still being judged in phase validation of contest: carry "
                                   "it into phase test once it has passed.")}
    for fate, sentence in expected.items():
        assert portal_refusal(c, entries[fate], "test", fate) == sentence
    key = token(c, "failed")
    with running_portal(c.home, tmp_path / "web.log") as portal, api(portal.base, key) as client:
        answer = client.post(f"/api/entries/{failed}/carry", data={"phase": "test"})
    assert (answer.status_code, answer.json()) == (409, {"error": expected["failed"][1]})
    assert c.queue.entry(portal_carry(c, entries["passed"], "test", "passed")).carried_from == entries["passed"]


def test_an_entry_carried_from_a_hidden_phase_shows_no_more_than_it(tmp_path, backend):
    """Sanity gives no feedback; validation, carrying from it, would show everything on a public
    board. A carried entry runs sanity's stages 1 and 2 again on the same archive and training
    set, so until sanity is published validation shows no more than sanity does: its entries
    "received", its board hidden, and the carry's answer without the counts; then as it says."""
    c = sanity_hidden(tmp_path, backend)
    a1, b1, c1 = c.submit("alice"), c.submit("bob"), c.submit("carol")
    c.judge(a1)
    c.judge(b1, fail=True)
    c.judge(c1)
    ch = load_challenge(c.directory)
    taken = carry(c.queue, "contest", ch, "validation", a1, rate_limited=True, owner="alice")
    assert (taken.feedback, taken.remaining_line(), taken.budget_line()) == ("none", None, None)
    v_alice = taken.entry_id
    v_bob = portal_carry(c, b1, "validation", "bob")  # taken: its failure in sanity is not told
    c.judge(v_alice)
    c.judge(v_bob, fail=True)  # fails again, at the same stage: what sanity keeps back
    for entry in (v_alice, v_bob):
        doc = show(c.site, c.queue, entry)
        assert (doc["state"], doc["outcome"], doc["reason"], doc["scores"], doc["feedback"]) == \
            ("received", None, None, {}, "none"), doc
    assert c.refused("leaderboard", "contest", "--phase", "validation").startswith(
        "The board of phase validation of contest is hidden until the organisers publish")
    phases = json.loads(c.vmjudge("phases", "contest", "--json").stdout)["phases"]
    assert [(p["name"], p["feedback"], p["board"]) for p in phases] == [
        ("sanity", "none", "hidden"), ("validation", "none", "hidden"), ("test", "none", "hidden")]
    key = token(c, "alice")
    with running_portal(c.home, tmp_path / "web.log") as portal, api(portal.base, key) as client:
        seen = client.get(f"/api/entries/{v_alice}").json()
        assert (seen["state"], seen["feedback"]) == ("received", "none")
        with closing(signed_in_client(portal.base, key)) as browser:
            board = browser.get("/leaderboards/contest?phase=validation").text
            assert "hidden until the organisers publish" in board and 'id="leaderboard"' not in board
            assert "0.7500" not in browser.get("/entries").text
    page = c.site.layout.results_of(v_alice).report  # report.html, for the organiser to pass on
    assert "Received" in page.read_text() and "0.7500" not in page.read_text()
    c.vmjudge("publish", "contest", "--phase", "sanity")
    assert "0.7500" in page.read_text()  # written again with sanity's publication
    told = carry(c.queue, "contest", ch, "validation", c1, rate_limited=True, owner="carol")
    assert (told.feedback, told.remaining_line(), told.budget_line()) == (
        "full", "9 scored entries remain for carol in phase validation", "0/10 of the 1000.00 h of VM time used by "
                                                                            "carol")
    assert show(c.site, c.queue, v_bob)["reason"] == "setup-error"
    assert show(c.site, c.queue, v_alice)["scores"]["score"] == 0.75
    assert [r["owner"] for r in json.loads(c.vmjudge("leaderboard", "contest", "--phase", "validation",
                                                     "--json").stdout)] == ["alice"]


def test_a_phase_without_feedback_counts_its_working_entries_without_telling_which_work(tmp_path, backend):
    """validation takes 2 working entries from each owner (max_working_per_owner). With its
    verdicts hidden, counting the ones that passed would tell them: alice's two passed, one of
    bob's failed, and each is told the same of a third."""
    c = hidden_contest(tmp_path, backend)
    said = {}
    for owner, fates in (("alice", ("passed", "passed")), ("bob", ("passed", "failed"))):
        sanity = [c.submit(owner) for _ in range(3)]
        for entry in sanity:
            c.judge(entry)
        carried = [c.carry(entry, "validation") for entry in sanity[:2]]
        for entry, fate in zip(carried, fates, strict=True):
            c.judge(entry, fail=fate == "failed")
        said[owner] = without(repr(portal_refusal(c, sanity[2], "validation", owner)), owner)
    assert said["alice"] == said["bob"], said
    assert "passed" not in said["alice"]


def promoted_cell(page: str) -> str:
    row = page.split('id="phase-test"')[1].split("</tr>")[0]
    return re.sub(r"\s+", " ", row.split('class="promoted">')[1].split("<br>")[0].split("</td>")[0]).strip()


def test_promoted_owners_are_listed_by_name_while_their_places_are_hidden(tmp_path, backend):
    """Validation's board is hidden: carol is first on it, alice second, Bob third. Promoted in
    two acts (the top 1, then the top 3), they are listed by name, whatever their places, on the
    phases page, its JSON and `vmjudge phases`, and nothing of a promotion tells which act took
    whom; once validation is published, by place, each with its place and act."""
    c = hidden_contest(tmp_path, backend)
    for owner, wrong in (("carol", 0), ("alice", 1), ("Bob", 2)):
        entry = c.submit(owner)
        c.judge(entry)
        v = c.carry(entry, "validation")
        c.judge(v, wrong=wrong)
    c.vmjudge("promote", "contest", "--phase", "test", "--top", "1")
    c.vmjudge("promote", "contest", "--phase", "test", "--top", "3")
    assert [p.owner for p in c.queue.phases.promotions("contest", "test")] == ["carol", "alice", "Bob"]
    key = token(c, "alice")
    with running_portal(c.home, tmp_path / "web.log") as portal:
        with api(portal.base, key) as client:
            doc = client.get("/api/challenges/contest/phases").json()
        with closing(signed_in_client(portal.base, key)) as browser:
            page = browser.get("/phases/contest").text
    promoted = doc["phases"][2]["promoted"]
    assert [p["owner"] for p in promoted] == ["alice", "Bob", "carol"]
    assert len({json.dumps({k: v for k, v in p.items() if k != "owner"}) for p in promoted}) == 1, promoted
    assert all(p["place"] is None for p in promoted)
    assert promoted_cell(page) == "alice, Bob, carol", promoted_cell(page)
    assert "top 1 of" not in promoted_cell(page)
    text = c.vmjudge("phases", "contest").stdout
    assert [line.split(":")[1].split(",")[0].strip() for line in text.splitlines() if "promoted:" in line] == [
        "alice", "Bob", "carol"], text
    c.vmjudge("publish", "contest", "--phase", "validation")
    doc = json.loads(c.vmjudge("phases", "contest", "--json").stdout)
    assert [(p["owner"], p["place"], p["how"]) for p in doc["phases"][2]["promoted"]] == [
        ("carol", 1, "top 1 of validation"), ("alice", 2, "top 3 of validation"), ("Bob", 3, "top 3 of validation")]
