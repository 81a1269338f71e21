"""Benchmark: the participants' portal under abuse (issue 31), JSON on stdout. No VM is started,
so no host lock is taken (the arguments are parsed first all the same).

A real `vmjudge web` on loopback, one challenge taking archives of up to 1 MiB. Two phases, in
the same run:

1. idle: the good owner (bob) uploads --uploads good 1 MB entries one after another (POST
   /api/entries; each time is measured) while reading his entries page (GET /entries, signed
   in) --requests times, in rounds, for --idle-seconds.
2. abuse: the same rounds, while one hostile owner (mallory, a process of her own) sends --bombs
   tar bombs at once (a tar.gz of about 1 MB whose first member is --bomb-mib MiB of zeros,
   refused only once that member has been decompressed: its second member declares more than
   the challenge unpacks) and opens --slow slow clients at the same moment (half drip a header
   byte a second, half send 70 KB of a declared 900 KB upload and go idle); once those are all
   closed, she sends one bomb after another, each as soon as the last is answered, until
   --checked of them have been checked and refused. Bob's rounds go on until then, and for at
   least as long as the idle phase.

Checked (exit 1 with a sentence otherwise, after printing the JSON): bob's median upload time
and his page's p99 under abuse stay within 2x their idle figures; every slow client is closed by
the server within its timeout and a margin; no bomb is accepted, and --checked of them were
really checked; no upload's temporary file is left; the portal's log holds no traceback.

--smoke: the smallest inputs (a 64 MiB bomb, 10 bombs, 4 slow clients, 1 s and 2 s timeouts,
one bomb checked, 4 s idle), seconds, the same checks; the two 2x figures are reported but do not
fail a smoke run, which the test suite makes on a machine busy with its VMs: there it shows that
the bench runs and the portal holds (no bomb in, slow clients closed, nothing left), not its speed.

Usage: python bench/web_abuse.py [--smoke] [--uploads 5] [--requests 200] [--bombs 70] [--slow 20]
       [--bomb-mib 1000] [--checked 3] [--idle-seconds 20] [--header-timeout 10] [--body-timeout 30]
       [--dir /var/tmp]
"""

from __future__ import annotations

import argparse
import io
import json
import multiprocessing
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
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402

from bench.web import entry_archive, free_port  # noqa: E402  (the idle-portal bench's helpers)
from vmjudge.config import load_site  # noqa: E402
from vmjudge.queue.db import Queue  # noqa: E402
from vmjudge.queue.owners import Owners  # noqa: E402

MIB = 1 << 20
CSRF = re.compile(r'name="csrf" value="([^"]+)"')


class Zeros(io.RawIOBase):
    """`n` zero bytes, read without holding them all (tarfile copies a member from a file)."""

    def __init__(self, n: int):
        self.left = n

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def]
        n = min(len(buffer), self.left)
        buffer[:n] = bytes(n)
        self.left -= n
        return n


def tar_bomb(path: Path, zeros: int) -> Path:
    """A tar.gz: `zeros` zero bytes in setup.sh, then a member declaring 1 MiB with no data
    (past max_unpacked once setup.sh's bytes are counted: refused at its header, after setup.sh
    was decompressed whole)."""
    with tarfile.open(path, "w:gz", compresslevel=9) as tf:
        info = tarfile.TarInfo("setup.sh")
        info.size = zeros
        tf.addfile(info, Zeros(zeros))
        more = tarfile.TarInfo("next.sh")
        more.size = MIB
        tf.fileobj.write(more.tobuf())  # type: ignore[union-attr]
    return path


def start_portal(home: Path, log: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "vmjudge.cli", "web", "--listen", f"127.0.0.1:{port}",
                                 "--no-secure-cookies"], cwd=REPO, env={**os.environ, "VMJUDGE_HOME": str(home)},
                                stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc, port
        except OSError:
            if proc.poll() is not None:
                sys.exit(f"bench/web_abuse.py: vmjudge web exited before it listened: {log.read_text()}")
            time.sleep(0.05)
    proc.terminate()
    sys.exit("bench/web_abuse.py: vmjudge web did not listen within 60 s")


def percentile(times: list[float], p: float) -> float:
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


class Good:
    """Bob: uploads one good entry at a time and reads his entries page."""

    def __init__(self, base: str, token: str, archives: list[Path]):
        self.base, self.token, self.archives = base, token, archives
        self.page = httpx.Client(base_url=base, timeout=120)
        csrf = CSRF.search(self.page.get("/signin").text)
        if not csrf or self.page.post("/signin", data={"token": token, "csrf": csrf.group(1)}).status_code != 303:
            sys.exit("bench/web_abuse.py: bob could not sign in")

    def uploads(self, which: list[Path]) -> list[float]:
        times = []
        with httpx.Client(base_url=self.base, timeout=120, headers={"Authorization": f"Bearer {self.token}"}) as c:
            for path in which:
                start = time.perf_counter()
                with path.open("rb") as f:
                    answer = c.post("/api/entries", data={"challenge": "bench"}, files={"archive": (path.name, f)})
                times.append(time.perf_counter() - start)
                if answer.status_code != 201:
                    sys.exit(f"bench/web_abuse.py: bob's {path.name} got {answer.status_code}: {answer.text}")
        return times

    def pages(self, requests: int) -> list[float]:
        times = []
        for _ in range(requests):
            start = time.perf_counter()
            answer = self.page.get("/entries")
            times.append(time.perf_counter() - start)
            if answer.status_code != 200:
                sys.exit(f"bench/web_abuse.py: bob's entries page answered {answer.status_code}")
        return times

    def figures(self, uploads: list[Path], requests: int, until: Any) -> dict[str, float]:
        """Rounds of uploads and page reads side by side, as a participant's browser would do
        both, until `until()` holds after a round."""
        upload_times: list[float] = []
        page_times: list[float] = []
        rounds = 0
        while True:
            with ThreadPoolExecutor(1) as pool:
                pages = pool.submit(self.pages, requests)
                upload_times += self.uploads(uploads)
                page_times += pages.result()
            rounds += 1
            if until():
                break
        return {"rounds": rounds, "uploads": len(upload_times),
                "upload_median_s": round(statistics.median(upload_times), 4),
                "upload_p90_s": round(percentile(upload_times, 0.9), 4), "page_requests": len(page_times),
                "page_p50_ms": round(1000 * statistics.median(page_times), 2),
                "page_p99_ms": round(1000 * percentile(page_times, 0.99), 2)}


def bomb(base: str, token: str, data: bytes) -> int:
    answer = httpx.post(base + "/api/entries", data={"challenge": "bench"}, timeout=300,
                        files={"archive": ("bomb-entry.tar.gz", data)}, headers={"Authorization": f"Bearer {token}"})
    return answer.status_code


def slow_client(port: int, token: str, kind: str, give_up: float) -> float:
    """A connection that drips its headers, or stalls mid-upload; seconds until the server closed it."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.settimeout(0.2)
    start = time.monotonic()
    try:
        if kind == "headers":
            sock.sendall(b"GET /entries HTTP/1.1\r\nHost: x\r\n")
        else:
            boundary = "b0undary"
            body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"challenge\"\r\n\r\nbench\r\n"
                    f"--{boundary}\r\nContent-Disposition: form-data; name=\"archive\"; filename=\"s-entry.tar.gz\""
                    "\r\n\r\n").encode() + b"\x1f\x8b" + b"\0" * 70_000
            sock.sendall(f"POST /api/entries HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
                         f"Content-Type: multipart/form-data; boundary={boundary}\r\nContent-Length: 900000\r\n\r\n"
                         .encode() + body)
        last_drip = time.monotonic()
        while time.monotonic() - start < give_up:
            if kind == "headers" and time.monotonic() - last_drip >= 1:
                try:
                    sock.sendall(b"X")
                except OSError:
                    return time.monotonic() - start
                last_drip = time.monotonic()
            try:
                if sock.recv(65536) == b"":
                    return time.monotonic() - start
            except TimeoutError:
                continue
            except OSError:
                return time.monotonic() - start
        return float("inf")
    finally:
        sock.close()


def attack(base: str, port: int, token: str, bomb_bytes: bytes, bombs: int, slow: int, checked: int,
           give_up: float, fired: Any, done: Any, results: Any) -> None:
    """Mallory, in a process of her own (so that her threads do not slow bob's client): the bombs
    and the slow clients all at once; once the slow clients are all closed (one of her stalled
    uploads holds her one turn until then), one bomb after another, each sent once the last is
    answered, until `checked` of them have been checked and refused (400). Every answer's status
    and each slow client's time to be closed are put on `results`, and `done` set. Her process
    runs at nice 10: her CPU would be her own machine's, not the judge's, and here both share
    the same cores."""
    os.nice(10)
    with ThreadPoolExecutor(bombs) as bomb_pool, ThreadPoolExecutor(max(1, slow)) as slow_pool:
        go = threading.Barrier(bombs + slow + 1)

        def at_once(fn: Any, *args: Any) -> Any:
            go.wait()
            return fn(*args)

        burst = [bomb_pool.submit(at_once, bomb, base, token, bomb_bytes) for _ in range(bombs)]
        slowed = [slow_pool.submit(at_once, slow_client, port, token, "headers" if i % 2 else "upload", give_up)
                  for i in range(slow)]
        go.wait()
        fired.set()
        burst_codes = [f.result() for f in burst]
        closed_after = [f.result() for f in slowed]
        following: list[int] = []
        while following.count(400) < checked and len(following) < 10 * checked + 50:
            following.append(bomb(base, token, bomb_bytes))
        results.put((burst_codes, following, closed_after))
        done.set()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="the smallest inputs, a few seconds, the same checks")
    parser.add_argument("--uploads", type=int, default=5)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--bombs", type=int, default=70)
    parser.add_argument("--slow", type=int, default=20)
    parser.add_argument("--bomb-mib", type=int, default=1000)
    parser.add_argument("--header-timeout", type=float, default=10.0)
    parser.add_argument("--body-timeout", type=float, default=30.0)
    parser.add_argument("--checked", type=int, default=3, help="bombs checked one after another")
    parser.add_argument("--idle-seconds", type=float, default=20.0)
    parser.add_argument("--dir", type=Path, default=Path("/var/tmp"))
    args = parser.parse_args()
    if args.smoke:
        args.uploads, args.requests, args.bombs, args.slow, args.bomb_mib, args.checked = 2, 20, 10, 4, 64, 1
        args.header_timeout, args.body_timeout, args.idle_seconds = 1.0, 2.0, 4.0
    root = Path(tempfile.mkdtemp(prefix="bench-web-abuse-", dir=args.dir))
    server = None
    try:
        home, challenge, made = root / "home", root / "bench", root / "archives"
        for d in (home, challenge, made):
            d.mkdir()
        (home / "site.toml").write_text(f"[web]\nheader_timeout = {args.header_timeout}\n"
                                        f"body_timeout = {args.body_timeout}\n")
        # Bob's limits are raised so that his 2 x --uploads entries are all taken; mallory is held by
        # everything else: one upload in flight, failed uploads (the default 30 an hour), timeouts.
        (challenge / "challenge.toml").write_text(
            f'name = "bench"\n[entry]\nmax_size = 1048576\nmax_unpacked = {args.bomb_mib * MIB + 512 * 1024}\n'
            "[limits]\nsubmissions_per_hour = 1000\npending_per_owner = 1000\n")
        site = load_site(home)
        site.layout.ensure()
        queue = Queue(site.layout.queue_db)
        queue.add_challenge("bench", challenge, "key")
        owners = Owners(queue.database)
        bob, mallory = owners.add("bob"), owners.add("mallory")
        good = [entry_archive(made / f"g{i}-entry.tar.gz", 1_000_000) for i in range(2 * args.uploads + 1)]
        bomb_bytes = tar_bomb(made / "bomb-entry.tar.gz", args.bomb_mib * MIB).read_bytes()
        if len(bomb_bytes) > 1048576:
            sys.exit(f"bench/web_abuse.py: the bomb is {len(bomb_bytes)} bytes, over the challenge's 1 MiB: use a "
                     "smaller --bomb-mib")
        log = root / "portal.log"
        server, port = start_portal(home, log)
        base = f"http://127.0.0.1:{port}"
        bob_client = Good(base, bob, good)

        bob_client.uploads(good[:1])  # not measured: the first of anything is slower
        idle_until = time.monotonic() + args.idle_seconds
        idle = bob_client.figures(good[1:args.uploads + 1], args.requests, lambda: time.monotonic() > idle_until)

        give_up = max(args.header_timeout, args.body_timeout) + 15
        fired, done, results = multiprocessing.Event(), multiprocessing.Event(), multiprocessing.Queue()
        attacker = multiprocessing.Process(target=attack, args=(base, port, mallory, bomb_bytes, args.bombs,
                                                                args.slow, args.checked, give_up, fired, done,
                                                                results))
        attacker.start()
        if not fired.wait(60):
            sys.exit("bench/web_abuse.py: the attacker did not start within 60 s")
        started = time.monotonic()
        abuse = bob_client.figures(good[args.uploads + 1:], args.requests,  # at least as long as the idle phase
                                   lambda: done.is_set() and time.monotonic() - started >= args.idle_seconds)
        burst_codes, following, closed_after = results.get(timeout=give_up + 600)
        attacker.join(timeout=60)
        abuse_s = time.monotonic() - started
        codes = burst_codes + following
        uploads_left = [str(p) for p in (home / "uploads").rglob("*") if p.is_file()]
        logged = log.read_text(errors="replace")

        upload_ratio = abuse["upload_median_s"] / idle["upload_median_s"]
        page_ratio = abuse["page_p99_ms"] / idle["page_p99_ms"]
        longest = max(closed_after) if closed_after else 0.0
        speed = {"upload_within_2x": upload_ratio <= 2.0, "page_p99_within_2x": page_ratio <= 2.0}
        checks = {
            **speed,
            "slow_clients_closed_in_time": longest <= max(args.header_timeout, args.body_timeout) + 5,
            "no_bomb_accepted": 201 not in codes and all(c in (400, 413, 429) for c in codes),
            "bombs_were_checked": following.count(400) >= args.checked,
            "no_upload_file_left": uploads_left == [],
            "no_traceback_logged": "Traceback" not in logged,
        }
        print(json.dumps({
            "bench": "web_abuse", "smoke": args.smoke,
            "setup": {"good_archive_bytes": good[0].stat().st_size, "bomb_bytes": len(bomb_bytes),
                      "bomb_unpacks_mib": args.bomb_mib, "bombs": args.bombs, "slow_clients": args.slow,
                      "header_timeout_s": args.header_timeout, "body_timeout_s": args.body_timeout},
            "idle": idle, "abuse": abuse | {"seconds": round(abuse_s, 2)},
            "bombs_at_once": {str(c): burst_codes.count(c) for c in sorted(set(burst_codes))},
            "bombs_one_after_another": {str(c): following.count(c) for c in sorted(set(following))},
            "slow_clients_closed_after_s": {"min": round(min(closed_after), 2) if closed_after else None,
                                            "max": round(longest, 2)},
            "ratios": {"upload_median": round(upload_ratio, 2), "page_p99": round(page_ratio, 2)},
            "checks": checks, "speed_checks_enforced": not args.smoke,
            "host": {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version()},
        }, indent=2))
        failed = [name for name, ok in checks.items() if not ok and not (args.smoke and name in speed)]
        if failed:
            sys.exit(f"bench/web_abuse.py: the portal under abuse failed {', '.join(failed)}: see the JSON above.")
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
