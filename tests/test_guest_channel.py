"""The guest's writing end of the data channel, run as the guest runs it (its files alone, -I -S):
large frames spliced through a pipe to the port, small ones and a terminal's written, and every
byte decoded by the host's reader in order."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from vmjudge.images import build
from vmjudge.images.guest import frames

SEND = """
import json, os, sys
sys.path.insert(0, sys.argv[1])
import channel
spliced = []
splice = os.splice
def counted(src, dst, count, *args):
    n = splice(src, dst, count, *args)
    spliced.append(n)
    return n
os.splice = counted
if sys.argv[2] == "tty":
    master, slave = os.openpty()
    fd = slave
else:
    fd = sys.stdout.fileno()
ch = channel.Channel(fd)
sizes = json.loads(sys.argv[3])
if fd == 1:
    ch.send_json("hello", {"nonce": "n"})
    for size in sizes:
        ch.send("log", bytes(i % 251 for i in range(size)))
print(json.dumps({"relay": ch.relay is not None, "spliced": sum(spliced), "calls": len(spliced),
                  "min": channel.SPLICE_MIN, "room": ch.relay and ch.relay[2]}), file=sys.stderr)
"""


def send(tmp_path: Path, target: str, sizes: list[int]) -> tuple[dict, list[frames.Frame]]:
    guest = tmp_path / "guest"
    guest.mkdir(exist_ok=True)
    for name in build.GUEST_FILES:
        shutil.copyfile(build.GUEST_DIR / name, guest / name)
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", SEND, str(guest), target, json.dumps(sizes)],
                          capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()
    return json.loads(proc.stderr), frames.Decoder().feed(proc.stdout)


def test_large_frames_are_spliced_and_arrive_whole_and_in_order(tmp_path):
    sizes = [10, (64 << 10) - 100, 64 << 10, 512 << 10, frames.MAX_PAYLOAD, frames.MAX_PAYLOAD + 5, 3]
    report, sent = send(tmp_path, "pipe", sizes)
    payloads = [bytes(i % 251 for i in range(size)) for size in sizes]
    chunks = [p[i:i + frames.MAX_PAYLOAD] for p in payloads for i in range(0, max(len(p), 1), frames.MAX_PAYLOAD)]
    assert [f.kind for f in sent] == ["hello"] + ["log"] * len(chunks)
    assert [f.payload for f in sent[1:]] == chunks
    encoded = [len(frames.encode("log", n + 1, c)) for n, c in enumerate(chunks)]
    # The relay holds 2 MiB as root with CAP_SYS_RESOURCE (the guest's agent), else pipe-max-size (1 MiB).
    assert report["room"] in (1 << 20, 2 << 20)
    large = [n for n in encoded if report["min"] <= n <= report["room"]]
    # The frames from 64 KiB that fit the relay went by splice, every byte of them; the rest were written.
    assert report["relay"] and len(large) >= 2 and report["spliced"] == sum(large)


def test_a_terminal_gets_no_relay(tmp_path):
    report, sent = send(tmp_path, "tty", [])
    assert not report["relay"] and report["calls"] == 0 and sent == []
