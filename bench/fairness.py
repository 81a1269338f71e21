"""Benchmark: fair share on a real daemon with 2 slots (JSON on stdout; exit 1 with a sentence
when fairness does not hold; #20).

1. Owner A submits 20 dry-run entries of the corpus's tiny challenge (tests/hostile; a dry run
   stops after the quiz, so an entry is two VM stages). The daemon starts; once A's first stage
   has ended, B and then C submit one each. From the queue's stage_runs (claimed in id order):
   how many stage claims after B's (C's) submission its first stage was; each must be within
   the first 2.
2. Once a few of A's entries are done, `vmjudge rescore --rerun-stages` queues them again as
   the organiser's batch, and D submits an entry. No batch stage may be claimed while a
   participant's stage is ready: a participant entry is ready from its submission (or the
   transaction that queued its next stage) to its claim. Read from the queue's events in commit
   order (SQLite's one writer: their ids), never from clocks: a run's `started` is taken after
   its claim, so a batch stage claimed just before a participant's became ready could read, by
   the clock, as one that overtook it (the suite's smoke run failed so twice, 2026-11-27 and
   2026-12-04). The daemon is stopped (SIGTERM) once every participant's entry is done and a
   batch stage has started, so the verdict is known: later batch stages can no longer overtake
   anyone.

--smoke: A submits 3 entries (one more than the slots, so that one of A's stages is ready when B
and C submit) and 1 of them is re-run: the same checks, what the test suite runs.

Usage: python bench/fairness.py [--smoke] [--base DIR] [--entries 20] [--rerun 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack, closing
from pathlib import Path
from typing import TextIO

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.host_lock import HostBusy, exclusive_host, trial_guests  # noqa: E402
from tests.hostile.cases import tar_of  # noqa: E402
from vmjudge.config.layout import Layout  # noqa: E402
from vmjudge.queue.db import Queue  # noqa: E402

CHALLENGE = REPO / "tests" / "hostile" / "challenge"
WITHIN = 2  # B's and C's first stage among the first 2 claims after their submission
POLL = 0.5  # how often the bench reads the queue while the daemon works


def cli(home: Path, *args: str) -> str:
    return subprocess.run([sys.executable, "-m", "vmjudge.cli", *args], cwd=REPO, check=True, capture_output=True,
                          text=True, env={**os.environ, "VMJUDGE_HOME": str(home)}, timeout=600).stdout


def until(what: str, done: Callable[[], bool], daemon: subprocess.Popen, limit: float = 1800) -> None:
    """Reads the queue until `done`; the daemon dying or the limit passing ends the bench."""
    deadline = time.monotonic() + limit
    while not done():
        if daemon.poll() is not None:
            raise SystemExit(f"the daemon stopped (status {daemon.returncode}) before {what}.")
        if time.monotonic() > deadline:
            raise SystemExit(f"{what} did not happen within {limit:.0f} s.")
        time.sleep(POLL)


def claims(db: Path) -> list[dict]:
    """Every stage run in claim order, with its entry's owner and whether it is batch work."""
    queue = Queue(db)
    out = [{"id": run.id, "entry": entry.id, "owner": entry.owner, "stage": run.stage, "started": run.started,
            "vm_seconds": run.vm_seconds, "status": run.status, "evaluation": run.evaluation}
           for entry in queue.entries() for run in queue.stage_runs(entry.id)]
    return sorted(out, key=lambda r: r["id"])


def first_claim_after(runs: list[dict], owner: str, last_before: int) -> int:
    """How many claims after the submission (runs with id > last_before) the owner's first was."""
    after = [r for r in runs if r["id"] > last_before]
    return next(i for i, r in enumerate(after, start=1) if r["owner"] == owner)


def overtakings(db: Path, batch: set[int]) -> list[dict]:
    """Every claim of a batch stage made while a participant's stage was ready, from the events in
    commit order: `submitted`, `requeued` and `stage` (passed, the next one queued) make an entry's
    stage ready, its `running` (the claim) or its end takes it out; an entry of `batch` is the
    organiser's from its `rerun` on. An infrastructure retry waits out its delay: not ready."""
    with closing(sqlite3.connect(db)) as con:
        events = con.execute("SELECT id, entry_id, kind FROM events WHERE entry_id IS NOT NULL ORDER BY id").fetchall()
    rerun: set[int] = set()
    ready: dict[int, int] = {}  # participant entry -> the event that made its stage ready
    found = []
    for event_id, entry, kind in events:
        organisers = entry in rerun
        if kind == "rerun" and entry in batch:
            rerun.add(entry)
        elif kind in ("submitted", "requeued", "stage") and not organisers:
            ready[entry] = event_id
        elif kind == "running" and organisers and ready:
            found.append({"batch_claim_event": event_id, "entry": entry, "ready_participants": sorted(ready)})
        if kind in ("running", "done", "infra"):
            ready.pop(entry, None)
    return found


def arguments() -> argparse.ArgumentParser:
    """Its options, parsed before the host is taken, so that --help never waits for it."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", type=Path, default=Path(os.environ.get("VMJUDGE_TEST_HOME", "/var/tmp/vmjudge-test")),
                    help="a home whose built images are used (symlinked)")
    ap.add_argument("--entries", type=int, default=20)
    ap.add_argument("--rerun", type=int, default=3, help="A's finished entries queued again as the batch")
    ap.add_argument("--smoke", action="store_true", help="3 entries of A's, 1 re-run: the same checks")
    return ap


def main(args: argparse.Namespace) -> dict:
    trial_guests()
    if args.smoke:
        args.entries, args.rerun = 3, 1
    home = Path(tempfile.mkdtemp(prefix="fairness-", dir=args.base.parent))
    os.chmod(home, 0o711)
    Layout(home).images.parent.mkdir(parents=True, exist_ok=True)
    Layout(home).images.symlink_to(Layout(args.base).images)
    db = Layout(home).queue_db
    archive = tar_of({"DRYRUN": b"a dry run\n"}, home / "dry-entry.tar.gz")
    began = time.monotonic()
    with ExitStack() as closing:
        daemon_err = closing.enter_context(open(home / "daemon.err", "w"))  # its warnings, if any
        return _run(args, home, db, archive, daemon_err, began)


def _run(args: argparse.Namespace, home: Path, db: Path, archive: Path, daemon_err: TextIO, began: float) -> dict:
    daemon = None
    try:
        cli(home, "challenge", "add", str(CHALLENGE))
        a_ids = [int(cli(home, "submit", "hostile", str(archive), "--owner", "A")) for _ in range(args.entries)]
        daemon = subprocess.Popen([sys.executable, "-m", "vmjudge.cli", "daemon", "--slots", "2", "-q"], cwd=REPO,
                                  env={**os.environ, "VMJUDGE_HOME": str(home)}, stdout=subprocess.DEVNULL,
                                  stderr=daemon_err)
        until("A's first stage ended", lambda: any(r["status"] for r in claims(db)), daemon)
        positions = {}
        for owner in ("B", "C"):
            last = max((r["id"] for r in claims(db)), default=0)
            entry_id = int(cli(home, "submit", "hostile", str(archive), "--owner", owner))
            positions[owner] = (entry_id, last)
        until("B's and C's first stages started",
              lambda: {"B", "C"} <= {r["owner"] for r in claims(db)}, daemon)
        runs = claims(db)
        first = {owner: first_claim_after(runs, owner, last) for owner, (_, last) in positions.items()}

        until(f"{args.rerun} of A's entries were done",
              lambda: sum(Queue(db).entry(i).state == "done" for i in a_ids) >= args.rerun, daemon)
        batch = [i for i in a_ids if Queue(db).entry(i).state == "done"][:args.rerun]
        rescore = json.loads(cli(home, "rescore", "hostile", "--entries", ",".join(map(str, batch)),
                                 "--rerun-stages", "--json"))
        batch_evaluations = {(i, Queue(db).entry(i).evaluation) for i in batch}
        d_id = int(cli(home, "submit", "hostile", str(archive), "--owner", "D"))
        participants = [e.id for e in Queue(db).entries() if e.id not in batch]

        def verdict_known() -> bool:
            q = Queue(db)
            runs = claims(db)
            batch_started = any((r["entry"], r["evaluation"]) in batch_evaluations for r in runs)
            return batch_started and all(q.entry(i).state == "done" for i in participants) and \
                all(q.entry(i).state in ("done", "running", "queued") for i in batch)
        until("every participant's entry was done and a batch stage had started", verdict_known, daemon)
    finally:
        if daemon is not None and daemon.poll() is None:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=300)
    runs = claims(db)
    batch_runs = [r for r in runs if (r["entry"], r["evaluation"]) in batch_evaluations]
    overtaken = overtakings(db, set(batch))
    result = {
        "benchmark": "fairness", "smoke": args.smoke, "slots": 2, "challenge": "hostile (dry runs: prep and quiz)",
        "owner_a_entries": args.entries,
        "first_stage_claims_after_submission": {o: {"entry": positions[o][0], "position": first[o],
                                                    "within": WITHIN, "met": first[o] <= WITHIN} for o in first},
        "claim_order": [f"{r['id']}:{r['owner']}{r['entry']}/{r['stage']}"
                        + ("(batch)" if (r["entry"], r["evaluation"]) in batch_evaluations else "") for r in runs],
        "batch": {"entries": batch,
                  "requeued": [e["entry_id"] for e in rescore["entries"] if e["status"] == "requeued"],
                  "stages_started": len(batch_runs), "participant_d": d_id,
                  "batch_stages_claimed_while_a_participant_was_ready": overtaken, "met": not overtaken},
        "stage_runs": len(runs), "seconds": round(time.monotonic() - began, 1), "home": str(home),
    }
    result["met"] = all(v["met"] for v in result["first_stage_claims_after_submission"].values()) and not overtaken
    shutil.rmtree(home, ignore_errors=True)
    return result


if __name__ == "__main__":
    parsed = arguments().parse_args()
    try:
        with exclusive_host("this benchmark"):
            outcome = main(parsed)
    except HostBusy as exc:
        raise SystemExit(str(exc)) from None
    print(json.dumps(outcome, indent=2))
    if not outcome["met"]:
        late = {o: v["position"] for o, v in outcome["first_stage_claims_after_submission"].items() if not v["met"]}
        overtook = len(outcome["batch"]["batch_stages_claimed_while_a_participant_was_ready"])
        raise SystemExit(f"fairness does not hold: first stages after submission {late or 'in time'}, and {overtook} "
                         "batch stage(s) claimed while a participant's stage was ready.")
