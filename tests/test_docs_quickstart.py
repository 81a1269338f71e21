"""The participants' quickstart (docs/participants.md, "Quickstart", #58) run as written: its shell
lines, with the portal's address and a token put in, against a real `vmjudge web` over a home with the
af2017 example registered. The replica's download and boot need the judge's image: the quickstart's
qemu line must be the one "The replica ISO" gives (which tests/test_replica.py boots), and its download
is the route tests/test_replica.py fetches."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

from .docs_page import section
from .web_home import WebHome
from .web_process import running_portal

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "af2017"


def quickstart_lines() -> list[str]:
    text = section("participants.md", "Quickstart")
    blocks = re.findall(r"```sh\n(.*?)```", text, flags=re.S)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def run(line: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_the_quickstart_runs_as_written(tmp_path):
    web = WebHome(tmp_path)
    directory = tmp_path / "af2017"
    shutil.copytree(EXAMPLE, directory)
    web.register("af2017", directory)
    token = web.owners.add("ana")
    lines = quickstart_lines()
    replica = [ln for ln in lines if "download/replica" in ln or ln.startswith("qemu-system")]
    assert len(replica) == 2
    guide = next(ln.strip() for ln in section("participants.md", "The replica ISO").splitlines()
                 if ln.strip().startswith("qemu-system-x86_64 -m 2048 -cpu max -cdrom"))
    assert shlex.split(replica[1]) == [a.replace("replica.iso", "af2017-replica.iso") for a in shlex.split(guide)]
    work = tmp_path / "work"
    work.mkdir()
    with running_portal(web.home, tmp_path / "web.log") as portal:
        env = {"PATH": "/usr/bin:/bin", "HOME": str(work), "JUDGE": portal.base, "TOKEN": token}
        outputs = {}
        for line in lines:
            if line in replica or line.startswith(("JUDGE=", "TOKEN=")):
                continue
            done = run(line, work, env)
            assert done.returncode == 0, (line, done.stdout, done.stderr)
            outputs[line.split("#")[0].strip()] = done.stdout
        facts = json.loads(next(out for cmd, out in outputs.items() if cmd.endswith("/api/challenges/af2017")))
        again = json.loads(run(f"curl -fsS {portal.base}/api/challenges/af2017", work, env).stdout)
        shown = {d["name"]: d["sha256"] for d in again["downloads"]["files"] if "sha256" in d}
        assert facts["name"] == "af2017" and set(shown) == {"af2017-sample-entry.tar.gz", "af2017-training.tar.gz"}
        sums = dict(reversed(line.split()) for line in outputs["sha256sum af2017-*"].splitlines())
        assert sums == shown
        assert hashlib.sha256((work / "entries" / "af2017-sample-entry.tar.gz").read_bytes()).hexdigest() == \
            shown["af2017-sample-entry.tar.gz"]
        submitted = json.loads(next(out for cmd, out in outputs.items() if cmd.endswith("/api/entries")
                                    and "-F" in cmd))
        assert submitted["id"] == 1 and submitted["owner"] == "ana"
        report = json.loads(next(out for cmd, out in outputs.items() if cmd.endswith("/api/entries/1")))
        assert report["id"] == 1 and report["state"] == "queued"
