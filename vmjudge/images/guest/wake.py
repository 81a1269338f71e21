"""A warm-started VM's first moments: the agent of a saved VM waits here, and wakes as a
freshly booted one would be.

The host boots a VM once with `vmjudge.warm=1`, lets the agent reach wait_for_wake (before
it has opened the CD-ROM or seen a home disk: the VM has neither yet), and saves it. Every
stage restored from that state resumes inside the read below. Until the host's "go" line
arrives nothing of the stage exists in the VM, and what the saved state shares with every
other restore of it must not leak into the stage: the kernel's random pool (the same saved
bytes in every restore, so the same /dev/urandom, AT_RANDOM, stack canaries and ASLR) is
reseeded from the host's fresh randomness before any process is started, and the clock,
which stood still while the state lay on disk, is set to the host's.
"""

import fcntl
import os
import struct
import time

# linux/random.h: credit entropy to the input pool, then rekey the CRNG from it at once
# (without the second, the kernel would go on using the saved key until its next reseed).
RNDADDENTROPY = 0x40085203
RNDRESEEDCRNG = 0x5207
READY = b"warm: ready"
MAX_GO = 256


def reseed(seed):
    """Mix `seed` into the kernel's pool, credited in full, and rekey the CRNG: every later
    getrandom(), exec (AT_RANDOM, ASLR) and fork (stack canary) draws from the new key."""
    fd = os.open("/dev/urandom", os.O_WRONLY | os.O_CLOEXEC)
    try:
        fcntl.ioctl(fd, RNDADDENTROPY, struct.pack("ii", len(seed) * 8, len(seed)) + seed)
        fcntl.ioctl(fd, RNDRESEEDCRNG)
    finally:
        os.close(fd)


def wait_for_wake(channel):
    """Say the agent is ready to be saved, then block until a restored VM is told to go.
    The line is the host's: "go <unix time in ns> <seed in hex>\\n"."""
    channel.send("log", READY)
    line = b""
    while not line.endswith(b"\n"):
        chunk = os.read(channel.fd, 1)
        if not chunk:
            # No host on the other side for a moment (a restored VM before its new pty is open):
            # the host destroys a VM that does not answer, so waiting here is bounded.
            time.sleep(0.05)
            continue
        line += chunk
        if len(line) > MAX_GO:
            raise SystemExit("vmjudge agent: the wake line is too long")
    word, now_ns, seed = line.split()
    if word != b"go":
        raise SystemExit(f"vmjudge agent: unexpected wake line {line!r}")
    reseed(bytes.fromhex(seed.decode("ascii")))
    time.clock_settime_ns(time.CLOCK_REALTIME, int(now_ns))
    channel.seq = 0  # the restored run's frames are numbered afresh, as a cold boot's
