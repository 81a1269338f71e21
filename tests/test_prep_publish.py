"""Issue 54: a container entry's stage 1 takes the same time to its participant whether its root
was made or found made (someone else sent the same layers before), on a real queue with real
roots (no VM): entries submitted with the real admission code, their stage 1 run by the real
stage on the host (skopeo, umoci, mksquashfs) and recorded by the supervisor's own code, as the
daemon does; what each participant sees read from a real `vmjudge web` process, polled through
the API the whole time, and from the daemon's own sender through a real SMTP server.

Two owners send the same layers: alice first (her root is made), bob second (his is found made).
Once with submitted results (stage 1 passes: the quiz is next), once with a link where a result
should be (stage 1 fails after the root, `bad-image`: the entry ends, and its owner is emailed).
For each pair, what the second participant sees of stage 1's time is what the first sees: the
entry running stage 1 for one whole step (publish.PREP_STEP) from its start, by every poll of
the list; the same documents (the API's entry, its list row, the report page) before and after
that moment; the mail no earlier than it; the same charge; counts that keep the entry waiting
until then; and a quiz no slot can take before it."""

from __future__ import annotations

import json
import random
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from vmjudge.config import Site, load_challenge, load_site
from vmjudge.config.notify import NotifySite, SmtpSite
from vmjudge.images.image import GuestImage
from vmjudge.pipeline import by_name
from vmjudge.queue import publish
from vmjudge.queue.admit import admit
from vmjudge.queue.db import Queue
from vmjudge.queue.outbox import listing
from vmjudge.queue.owners import Owners
from vmjudge.reports import participant
from vmjudge.reports.notice import owner_message
from vmjudge.stages.context import StageContext
from vmjudge.supervisor.attempts import record_outcome
from vmjudge.supervisor.notifier import Notifier

from . import oci_images as oci
from .needs import root_making_tools
from .notify_servers import SmtpServer
from .oci_images import Image, Layer
from .test_phases import backend, make_contest
from .test_root_gc import HostDisks
from .waiting import wait_for
from .web_process import running_portal, signed_in_client

__all__ = ["backend"]  # the contest's queue: SQLite, then PostgreSQL (test_phases.py)

CHALLENGE = oci.container_challenge("pp")
KINDS = ("pass", "fail")  # stage 1 passes (the quiz is next), or fails after the root
OWNERS = ("alice", "bob")  # alice's entries go first: her roots are made, bob's found made
POLL = 0.1  # seconds between two polls of an owner's list
SLACK = 1.0  # what a poll's own time and interval may add to a transition seen by polling


DATA = random.Random(54).randbytes(24 << 20)  # enough that making a root takes a while, finding it not


def layers(kind: str) -> list[Layer]:
    """The one layer both owners send: with a submitted result (stage 1 passes), or with a link
    in its place (stage 1 fails after the root is made or found: bad-image)."""
    result = (oci.file("submitted/r1.txt", b"R1\n") if kind == "pass"
              else oci.symlink("submitted/r1.txt", "/etc/passwd"))
    return [Layer.of([oci.directory("submitted"), result, oci.file("data", kind.encode() + DATA)], None)]


@dataclass
class Poller:
    """An owner's list (GET /api/entries) polled until stopped: when each entry's (state, stage,
    outcome) was first seen, in order."""

    client: httpx.Client
    seen: dict[int, list[tuple[float, tuple]]] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)
    errors: list[str] = field(default_factory=list)
    last: float = 0.0  # when the latest poll was sent

    def run(self) -> None:
        while not self.stop.is_set():
            self.last = asked = time.time()
            try:
                answer = self.client.get("/api/entries")
                rows = answer.json()["entries"]
            except (httpx.HTTPError, ValueError, KeyError) as exc:
                self.errors.append(f"{type(exc).__name__}: {exc}")
                rows = []
            for row in rows:
                state = (row["state"], row["stage"], row["outcome"])
                history = self.seen.setdefault(row["id"], [])
                if not history or history[-1][1] != state:
                    history.append((asked, state))
            self.stop.wait(POLL)

    def prep_window(self, entry_id: int) -> tuple[float, float] | None:
        """When the entry was first seen running stage 1, and first seen otherwise after that."""
        history = self.seen.get(entry_id, [])
        starts = [t for t, s in history if s[:2] == ("running", "prep")]
        if not starts:
            return None
        ends = [t for t, s in history if t > starts[0] and s[:2] != ("running", "prep")]
        return (starts[0], ends[0]) if ends else None


@dataclass
class Judged:
    home: Path
    queue: Queue
    ids: dict[tuple[str, str], int]  # (kind, owner) -> entry id
    started: dict[int, float]  # stage 1's start (its run's), epoch seconds
    ended: dict[int, float]  # when the supervisor's record of stage 1 returned
    pollers: dict[str, Poller]
    early: dict[int, dict]  # each entry's documents right after its stage 1 ended
    late: dict[int, dict]  # and once every stage 1 had been published
    claimed_early: dict[int, bool]  # whether a slot could take the quiz right after stage 1
    usage_early: dict[str, tuple[int, int, float]]  # each owner's _counts right after all stage 1s
    usage_late: dict[str, tuple[int, int, float]]
    mails: dict[int, tuple[float, str, str]]  # entry -> (when accepted, subject, text)


def documents(portal_base: str, token: str, client: httpx.Client, entry_id: int) -> dict:
    """What the owner reads of the entry: its API document, its list row, its report page."""
    api = httpx.get(f"{portal_base}/api/entries/{entry_id}", headers={"authorization": f"Bearer {token}"}, timeout=30)
    rows = httpx.get(f"{portal_base}/api/entries", headers={"authorization": f"Bearer {token}"}, timeout=30)
    page = client.get(f"/entries/{entry_id}")
    assert api.status_code == rows.status_code == page.status_code == 200, (api.text, rows.text, page.text)
    row = next(r for r in rows.json()["entries"] if r["id"] == entry_id)
    return {"api": api.json(), "row": row, "page": page.text}


def challenge_home(root: Path):
    """The container challenge "pp" (one training and one test record) registered in a home under
    `root`, and the guest image its stages name (never booted)."""
    guest = GuestImage(root, {"key": "k", "sha256": {}})  # named in stage 1's manifest, never booted
    challenge_dir = root / "challenge"
    for subset, record in (("training", "r1"), ("test", "t1")):
        (challenge_dir / subset).mkdir(parents=True)
        (challenge_dir / subset / "RECORDS").write_text(f"{record}\n")
        (challenge_dir / subset / f"{record}.txt").write_text("x\n")
    (challenge_dir / "challenge.toml").write_text(CHALLENGE)
    challenge = load_challenge(challenge_dir)
    site = load_site(root / "home")
    site.layout.ensure()
    queue = Queue(site.layout.queue_db)
    queue.add_challenge("pp", challenge_dir, "key")
    return guest, challenge, site, queue


@pytest.fixture(scope="module")
def judged(tmp_path_factory) -> Judged:
    root_making_tools()
    root = tmp_path_factory.mktemp("prep-publish")
    guest, challenge, site, queue = challenge_home(root)
    tokens = {o: Owners(queue.database).add(o, email=f"{o}@example.org") for o in OWNERS}
    ids: dict[tuple[str, str], int] = {}
    for kind in KINDS:
        for n, owner in enumerate(OWNERS):  # the same layers, another command: another archive
            archive = oci.docker_save(root / f"{owner}-{kind}-image.tar", Image(layers(kind), cmd=[f"/run{n}"]))
            ids[kind, owner] = admit(site, queue, "pp", challenge, archive, owner, False).entry_id
    order = [ids["pass", "alice"], ids["fail", "alice"], ids["pass", "bob"], ids["fail", "bob"]]
    started, ended, early, claimed_early = {}, {}, {}, {}
    with running_portal(site.home, root / "web.log") as portal, SmtpServer() as smtp:
        clients = {o: signed_in_client(portal.base, tokens[o]) for o in OWNERS}
        pollers = {o: Poller(httpx.Client(base_url=portal.base, timeout=30,
                                          headers={"authorization": f"Bearer {tokens[o]}"})) for o in OWNERS}
        threads = [threading.Thread(target=p.run, daemon=True) for p in pollers.values()]
        mail_site = Site(home=root, profile="trial", notify=NotifySite(
            smtp=SmtpSite(host="127.0.0.1", port=smtp.port, security="none", sender="judge@localhost"),
            retry_seconds=0.05))
        notifier = Notifier(mail_site, Queue(site.layout.queue_db), idle=0.05)
        for t in threads:
            t.start()
        notifier.start()
        try:
            for eid in order:
                wait_for(lambda eid=eid: any(eid in p.seen for p in pollers.values()), 30, f"entry {eid} in a list")
                entry = queue.claim_next(only=eid)  # stage 1 as the daemon runs it for a container entry
                run = queue.start_stage(eid, "prep", 0)
                started[eid] = float(run.started)
                ctx = StageContext(site=site, challenge=challenge, image=guest, entry=entry, attempt=run.attempt,
                                   runner=HostDisks())
                record_outcome(queue, run, by_name("prep").load()(ctx))
                ended[eid] = time.time()
                owner = queue.entry(eid).owner
                early[eid] = documents(portal.base, tokens[owner], clients[owner], eid)
            for eid in (ids["pass", "alice"], ids["pass", "bob"]):
                taken = queue.claim_next(only=eid)  # a free slot, asking for the quiz now
                claimed_early[eid] = taken is not None
            usage_early = {o: _counts(queue, o) for o in OWNERS}
            horizon = max(started.values()) + publish.PREP_STEP + 2 * SLACK  # past every publish time
            wait_for(lambda: all(p.last > horizon for p in pollers.values()), publish.PREP_STEP + 60,
                     "polls of every list past every stage 1's step")
            late = {eid: documents(portal.base, tokens[queue.entry(eid).owner], clients[queue.entry(eid).owner], eid)
                    for eid in order}
            usage_late = {o: _counts(queue, o) for o in OWNERS}
            wait_for(lambda: len(smtp.mailbox.mails) >= 2, 60, "the mails of the two entries that failed")
        finally:
            notifier.stop()
            for p in pollers.values():
                p.stop.set()
            for t in threads:
                t.join(timeout=30)
            for c in [*clients.values(), *(p.client for p in pollers.values())]:
                c.close()
    for kind in KINDS:  # the premise, from the organiser's record: bob's root was alice's, found made
        for owner, reused in (("alice", False), ("bob", True)):
            [run] = [r for r in queue.stage_runs(ids[kind, owner]) if r.stage == "prep"]
            assert run.manifest["entry_root"]["reused"] is reused, (kind, owner, run.manifest["entry_root"])
        took = {o: ended[ids[kind, o]] - started[ids[kind, o]] for o in OWNERS}
        assert took["bob"] < took["alice"], took  # and finding it took less time than making it
    mails = {}
    for at, _, mail in smtp.mailbox.mails:
        found = re.search(r"Entry (\d+) ", str(mail["Subject"]))
        assert found, mail["Subject"]
        mails[int(found.group(1))] = (at, str(mail["Subject"]), str(mail.get_payload()))
    return Judged(site.home, queue, ids, started, ended, pollers, early, late, claimed_early, usage_early, usage_late,
                  mails)


def _counts(queue: Queue, owner: str) -> tuple[int, int, float]:
    """What the owner's limits and budget count: entries pending, entries waiting, VM seconds used."""
    usage = queue.owner_usage("pp", owner, False)
    return usage.pending, usage.waiting, round(usage.vm_seconds, 3)


def normalised(text: str, judged: Judged, entry_id: int) -> str:
    """`text` with what differs by submission alone (id, owner, archive, its hash and time) as *."""
    entry = judged.queue.entry(entry_id)
    for value in (entry.archive_sha256, entry.archive_name, entry.submitted_at, entry.owner):
        text = text.replace(value, "*")
    for said in ("Entry {} ", "Entry {}<", "entry {} ", "entry {}<", "/entries/{}", '"id": {},'):
        text = text.replace(said.format(entry_id), said.format("*"))
    return re.sub(r'name="csrf" value="[^"]*"', 'name="csrf" value="*"', text)


def same_documents(judged: Judged, when: str, first: int, second: int) -> None:
    docs = getattr(judged, when)
    for part in ("api", "row", "page"):
        a, b = docs[first][part], docs[second][part]
        a, b = (json.dumps(x, sort_keys=True) if part != "page" else x for x in (a, b))
        assert normalised(a, judged, first) == normalised(b, judged, second), \
            f"{part} {when}: made (entry {first}) and found made (entry {second}) differ"



@pytest.mark.parametrize("kind", KINDS)
def test_every_poll_sees_stage_1_take_one_step_whether_the_root_was_made_or_found(judged, kind):
    windows = {}
    for owner in OWNERS:
        eid = judged.ids[kind, owner]
        poller = judged.pollers[owner]
        assert not poller.errors, poller.errors[:3]
        window = poller.prep_window(eid)
        assert window is not None, (f"{owner}'s entry {eid} ({kind}) was never seen running stage 1, or never seen "
                                    f"leave it", poller.seen.get(eid))
        first, last = window
        # Seen running no later than its start (+ a poll), and seen in stage 1 until its publish time.
        assert first <= judged.started[eid] + SLACK
        seen = last - judged.started[eid]
        assert publish.PREP_STEP - SLACK <= seen <= publish.PREP_STEP + SLACK, \
            (f"{owner}'s entry {eid} ({kind}): stage 1 seen to end {seen:.2f} s after it started; it really took "
             f"{judged.ended[eid] - judged.started[eid]:.3f} s", poller.seen[eid])
        windows[owner] = last - first
    assert abs(windows["alice"] - windows["bob"]) <= 2 * SLACK, windows


@pytest.mark.parametrize("kind", KINDS)
def test_what_each_participant_reads_is_the_same_made_or_found(judged, kind):
    """The API's entry, its list row and the report page: right after stage 1 really ended (stage
    1 still running, nothing of its outcome), and after its publish time (its outcome)."""
    first, second = judged.ids[kind, "alice"], judged.ids[kind, "bob"]
    for when in ("early", "late"):
        same_documents(judged, when, first, second)
    early, late = judged.early[second], judged.late[second]
    assert (early["api"]["state"], early["api"]["stage"], early["row"]["state"]) == ("running", "prep", "running")
    assert "Stage 1 (prep):" not in early["api"]["report"] and 'data-status="running"' in early["page"]
    assert "Stage 1 (prep):" in late["api"]["report"]
    assert late["api"]["state"] == ("queued" if kind == "pass" else "done")


def test_the_mail_of_an_entry_failed_at_stage_1_comes_no_earlier_than_its_publish_time(judged):
    sent = {}
    for owner in OWNERS:
        eid = judged.ids["fail", owner]
        at, subject, text = judged.mails[eid]
        assert at >= judged.started[eid] + publish.PREP_STEP, \
            f"{owner}'s mail came {at - judged.started[eid]:.2f} s after stage 1 started"
        sent[owner] = (at - judged.started[eid], normalised(subject + text, judged, eid))
    assert sent["alice"][1] == sent["bob"][1]
    assert abs(sent["alice"][0] - sent["bob"][0]) <= 2 * SLACK, sent
    # The message's row waits for the same moment, and the message itself is not made before it.
    for row in listing(judged.queue.database):
        if row.entry_id in (judged.ids["fail", o] for o in OWNERS):
            entry = judged.queue.entry(row.entry_id)
            assert row.not_before == pytest.approx(entry.published)
            assert owner_message(judged.queue, row, entry.published - 0.01, None) == entry.published


def test_stage_1_is_charged_as_long_as_it_is_seen_to_run(judged):
    for kind in KINDS:
        charged = {}
        for owner in OWNERS:
            [run] = [r for r in judged.queue.stage_runs(judged.ids[kind, owner]) if r.stage == "prep"]
            charged[owner] = run.vm_seconds
        assert charged["alice"] == pytest.approx(publish.PREP_STEP, abs=0.01), charged
        assert charged["bob"] == pytest.approx(publish.PREP_STEP, abs=0.01), charged


def test_an_owners_counts_keep_an_ended_stage_1_waiting_until_its_publish_time(judged):
    # Right after: both entries of each owner pending and waiting (the failed one too), and no
    # charge of either stage 1 counted yet. After: the failed one has given its place back, the
    # passed one (its quiz queued) still waits, and each stage 1 counts one step.
    assert judged.usage_early == dict.fromkeys(OWNERS, (2, 2, 0.0))
    assert judged.usage_late == dict.fromkeys(OWNERS, (1, 1, pytest.approx(2 * publish.PREP_STEP, abs=0.01)))


def test_no_slot_takes_the_quiz_before_stage_1_is_published(judged):
    assert judged.claimed_early == {judged.ids["pass", o]: False for o in OWNERS}
    for owner in OWNERS:
        eid = judged.ids["pass", owner]
        entry = judged.queue.entry(eid)
        assert entry.published == pytest.approx(judged.started[eid] + publish.PREP_STEP)
        taken = judged.queue.claim_next(only=eid)  # now it may run
        assert taken is not None and taken.stage == "quiz"


# The publish time itself


@pytest.mark.parametrize("took, root, made, steps", [
    (2.5, 2.0, 2.0, 1),      # made: its own time, a step
    (0.5, 0.001, 2.0, 1),    # found made in a millisecond: counted as the 2 s making took, a step
    (31.0, 29.0, 29.0, 2),   # made in 29 s: two steps
    (2.1, 0.001, 29.0, 2),   # found made, its making 29 s: two steps as well
    (40.0, 39.0, 2.0, 2),    # waited 39 s for another stage 1 making it: its own time counts, no less
])
def test_stage_1_is_published_at_whole_steps_counting_a_found_root_as_made(took, root, made, steps):
    start = 1_000_000.0
    assert publish.prep_publish_time(start, start + took, root, made) == start + steps * publish.PREP_STEP


def test_the_replica_publishes_nothing_and_its_quiz_may_run_at_once(tmp_path):
    """The replica checks stages 1 and 2 on the participant's own machine, with roots of its own:
    nothing to hide there, so its stage 1 asks for no publish time (publish_prep=False)."""
    root_making_tools()
    guest, challenge, site, queue = challenge_home(tmp_path)
    archive = oci.docker_save(tmp_path / "p-image.tar", Image(layers("pass")))
    eid = admit(site, queue, "pp", challenge, archive, "participant", False).entry_id
    entry = queue.claim_next(only=eid)
    run = queue.start_stage(eid, "prep", 0)
    ctx = StageContext(site=site, challenge=challenge, image=guest, entry=entry, attempt=run.attempt,
                       runner=HostDisks(), publish_prep=False)
    record_outcome(queue, run, by_name("prep").load()(ctx))
    assert queue.entry(eid).published is None and not participant.withheld(queue.entry(eid), time.time())
    assert queue.claim_next(only=eid) is not None


def test_carrying_an_entry_whose_stage_1_is_not_yet_published_says_it_is_still_being_judged(tmp_path, backend):
    """A contest's carry answers whether the entry passed: until stage 1's publish time, the
    entry whose stage 1 failed is still being judged to its owner, as every document says."""
    c = make_contest(tmp_path, backend)
    eid = c.submit("alice")
    c.queue.claim_next(only=eid)
    run = c.queue.start_stage(eid, "prep", 0)
    # What a container entry's stage 1 that found its root made records (stages/prep/container.py), then failing.
    timing = {publish.PREP_TIMING: {"root_seconds": 0.001, "made_seconds": 2.0}}
    c.queue.finish_stage(run, "failed", "The image holds a link at /submitted/s1.txt.", {"stage": "prep", **timing},
                         reason="bad-image", outcome="failed")
    entry = c.queue.entry(eid)
    assert entry.state == "done" and entry.published == pytest.approx(run.started + publish.PREP_STEP)
    assert c.refused("carry", "contest", str(eid), "--phase", "validation") == (
        f"entry {eid} is still being judged in phase sanity of contest: carry it into phase validation once it has "
        "passed.")
    with c.queue.database.transaction() as db:  # its publish time has come
        db.execute("UPDATE entries SET published = ? WHERE id = ?", (time.time() - 1, eid))
    assert c.refused("carry", "contest", str(eid), "--phase", "validation") == (
        f"entry {eid} did not pass phase sanity of contest: only an entry that passed it can be carried into phase "
        "validation.")
