"""Benchmark: the participants' portal (JSON on stdout). No VM is started.

1. Uploads per second of a 1 MB entry: the same kind of archive (a tar.gz of setup.sh, next.sh
   and 1 MB of random bytes, which gzip cannot shrink; each archive differs, so the spool stores
   every one) sent N times through the portal, a real `vmjudge web` (uvicorn) on loopback,
   by an httpx client (POST /api/entries with a bearer token: the same upload handler as the
   form's), and N times through `vmjudge submit` as a command (a process per entry, as an
   organiser's script would run it), in the same run. ratio = portal uploads/s ÷ submit's.
   Every upload must be accepted and every entry queued (checked).
2. Latency of the entries pages with 10 000 entries in the queue (inserted directly, in one
   transaction): the participant's "my entries" (its first page, a deep page, and the JSON its
   page polls) for an owner who has them all, and the organiser's all-entries page; --requests
   GETs each, one after another, p50 and p99 in milliseconds. Pages hold 25 entries.

These are figures of this machine at this moment (its cores, its disk, whatever else runs),
for comparison within one run; none is a limit that anything checks.

--smoke: 2 uploads each way, 300 entries, 5 requests a page (the deep page then the last), the
same checks (seconds; what the test suite runs).

Usage: python bench/web.py [--smoke] [--uploads 20] [--entries 10000] [--requests 200] [--dir /var/tmp]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402

from vmjudge.config import load_site  # noqa: E402
from vmjudge.queue.db import Queue  # noqa: E402
from vmjudge.queue.owners import Owners  # noqa: E402

MB = 1 << 20
CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def entry_archive(path: Path, size: int = MB) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in (("setup.sh", b"true\n"), ("next.sh", b"true\n"), ("data.bin", os.urandom(size))):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_portal(home: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "vmjudge.cli", "web", "--listen", f"127.0.0.1:{port}",
                             "--no-secure-cookies"], cwd=REPO, env={**os.environ, "VMJUDGE_HOME": str(home)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc, f"http://127.0.0.1:{port}"
        except OSError:
            if proc.poll() is not None:
                sys.exit("bench/web.py: vmjudge web exited before it listened")
            time.sleep(0.05)
    proc.terminate()
    sys.exit("bench/web.py: vmjudge web did not listen within 60 s")


def through_portal(base: str, token: str, archives: list[Path]) -> float:
    with httpx.Client(base_url=base, timeout=120, headers={"Authorization": f"Bearer {token}"}) as client:
        start = time.perf_counter()
        for path in archives:
            with path.open("rb") as f:
                response = client.post("/api/entries", data={"challenge": "bench"}, files={"archive": (path.name, f)})
            if response.status_code != 201:
                sys.exit(f"bench/web.py: the portal refused {path.name}: {response.status_code} {response.text}")
        return time.perf_counter() - start


def through_submit(home: Path, archives: list[Path]) -> float:
    env = {**os.environ, "VMJUDGE_HOME": str(home)}
    start = time.perf_counter()
    for path in archives:
        proc = subprocess.run([sys.executable, "-m", "vmjudge.cli", "submit", "bench", str(path), "--owner", "bob"],
                              cwd=REPO, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"bench/web.py: submit refused {path.name}: {proc.stderr}")
    return time.perf_counter() - start


def fill(queue: Queue, owner: str, n: int) -> None:
    """n done entries of `owner`, in one transaction (add_entry one by one would sync n times)."""
    with queue.database.transaction() as db:
        for i in range(n):
            db.execute("INSERT INTO entries (challenge, owner, archive_sha256, archive_name, archive_path, "
                       "submitted_at, state, stage, outcome, scores, finished_at) VALUES ('bench', ?, 'x', ?, '/x', "
                       "'2026-11-24T10:00:00Z', 'done', NULL, 'scored', ?, '2026-11-24T11:00:00Z')",
                       (owner, f"{i}-entry.tar.gz", json.dumps({"score": (i % 1000) / 1000})))


def latency(client: httpx.Client, path: str, requests: int) -> dict[str, float]:
    times = []
    for _ in range(requests):
        start = time.perf_counter()
        response = client.get(path)
        times.append(time.perf_counter() - start)
        if response.status_code != 200:
            sys.exit(f"bench/web.py: GET {path} answered {response.status_code}")
    times.sort()
    return {"requests": requests, "p50_ms": round(1000 * statistics.median(times), 2),
            "p99_ms": round(1000 * times[min(len(times) - 1, int(0.99 * len(times)))], 2),
            "bytes": len(response.content)}


def signed_in(base: str, token: str) -> httpx.Client:
    client = httpx.Client(base_url=base, timeout=60)
    csrf = CSRF.search(client.get("/signin").text)
    if not csrf or client.post("/signin", data={"token": token, "csrf": csrf.group(1)}).status_code != 303:
        sys.exit("bench/web.py: could not sign in")
    return client


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uploads", type=int, default=20)
    parser.add_argument("--entries", type=int, default=10000)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--dir", type=Path, default=Path("/var/tmp"))
    parser.add_argument("--smoke", action="store_true", help="the smallest inputs: seconds, the same checks")
    args = parser.parse_args()
    if args.smoke:
        args.uploads, args.entries, args.requests = 2, 300, 5
    root = Path(tempfile.mkdtemp(prefix="bench-web-", dir=args.dir))
    server = None
    try:
        home, challenge = root / "home", root / "bench"
        home.mkdir()
        challenge.mkdir()
        # the portal's limits on one owner raised: alice's uploads are the figure measured here
        (challenge / "challenge.toml").write_text('name = "bench"\n[entry]\nmax_size = 2097152\n[limits]\n'
                                                  'submissions_per_hour = 100000\npending_per_owner = 100000\n')
        site = load_site(home)
        site.layout.ensure()
        queue = Queue(site.layout.queue_db)
        queue.add_challenge("bench", challenge, "key")
        owners = Owners(queue.database)
        alice, olga = owners.add("alice"), owners.add("olga", organiser=True)
        made = root / "archives"
        made.mkdir()
        portal_archives = [entry_archive(made / f"p{i}-entry.tar.gz") for i in range(args.uploads)]
        submit_archives = [entry_archive(made / f"s{i}-entry.tar.gz") for i in range(args.uploads)]
        server, base = start_portal(home)
        portal_s = through_portal(base, alice, portal_archives)
        submit_s = through_submit(home, submit_archives)
        queued = [e for e in queue.entries() if e.state == "queued"]
        if len(queued) != 2 * args.uploads:
            sys.exit(f"bench/web.py: {len(queued)} entries queued, not {2 * args.uploads}")

        fill(queue, "alice", args.entries - len(queue.entries()))
        total = len(queue.entries())
        participant, organiser = signed_in(base, alice), signed_in(base, olga)
        alices = sum(e.owner == "alice" for e in queue.entries())
        deep = min(200, -(-alices // 25))  # the 200th page, or the last if there are fewer
        pages = {"my_entries": latency(participant, "/entries", args.requests),
                 f"my_entries_page_{deep}": latency(participant, f"/entries?page={deep}", args.requests),
                 "my_entries_json": latency(participant, "/entries.json", args.requests),
                 "organiser_all_entries": latency(organiser, "/organiser/entries", args.requests)}
        size = portal_archives[0].stat().st_size
        print(json.dumps({
            "bench": "web", "smoke": args.smoke,
            "upload": {"archive_bytes": size, "uploads": args.uploads,
                       "portal": {"seconds": round(portal_s, 3), "uploads_per_s": round(args.uploads / portal_s, 2)},
                       "submit": {"seconds": round(submit_s, 3), "uploads_per_s": round(args.uploads / submit_s, 2)},
                       "ratio_portal_vs_submit": round(submit_s / portal_s, 2)},
            "pages": {"entries_in_queue": total, "page_size": 25, **pages},
            "host": {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version()},
        }, indent=2))
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
