"""The writing end of the data channel: numbered frames, written whole, and ticks while the
agent is busy with something long of its own.

The reading end is the host's (vmjudge.supervisor.channel); the frame format is frames.py.
The terminal modules are imported where used: only the UART needs them, and every import is
paid at each boot, before the first frame, under emulation.
"""

import fcntl
import os
import subprocess
import threading
import time
import zlib

import frames
from system import wait_for

PORT_NAME = "org.vmjudge.data"
# A frame at least this large goes to the port through a pipe, by splice: a virtio port takes the
# pipe's pages in one transfer, one notice to the host for a MiB, where write() hands it over in
# 32 KiB pieces, each its own. A command's 16 MiB of output took 0.31 s of the guest's time instead
# of 0.38 (medians of 6 and 4 VMs under TCG, 2026-11-27).
SPLICE_MIN = 64 << 10
RELAY_SIZE = 2 << 20  # a whole frame: MAX_PAYLOAD and its header
MAX_PIPE = 1 << 20  # the kernel's default pipe-max-size, where RELAY_SIZE is refused: a larger frame is written


def _write_all(fd, views):
    """Every byte of the buffers, in order, through as many writev calls as it takes."""
    while views:
        n = os.writev(fd, views)
        while views and n >= len(views[0]):
            n -= len(views[0])
            views.pop(0)
        if views:
            views[0] = views[0][n:]


def relay_pipe(fd):
    """(read end, write end, capacity) of the pipe large frames are spliced through, or None
    for a terminal (the UART), which takes no transfer larger than a write."""
    if os.isatty(fd):
        return None
    r, w = os.pipe()
    for size in (RELAY_SIZE, MAX_PIPE):  # more than pipe-max-size needs CAP_SYS_RESOURCE
        try:
            fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, size)
            break
        except OSError:
            pass
    return r, w, fcntl.fcntl(w, fcntl.F_GETPIPE_SZ)


class Channel:
    """The writing end of the data channel: numbered frames, written whole."""

    def __init__(self, fd):
        self.fd = fd
        self.seq = 0
        self.last_sent = time.monotonic()
        self.lock = threading.RLock()  # ticks may come from a second thread (ticking())
        self.relay = relay_pipe(fd)

    def _write(self, *parts):
        """The parts in order, whole: a frame's header and payload are not joined first (a copy
        of each MiB of output, under emulation); a large frame that fits the relay is spliced."""
        views = [memoryview(p).cast("B") for p in parts]
        size = sum(len(v) for v in views)
        if self.relay is not None and SPLICE_MIN <= size <= self.relay[2]:
            read_end, write_end, _ = self.relay
            _write_all(write_end, views)  # the pipe holds the frame whole: this never waits for the port
            while size:
                moved = os.splice(read_end, self.fd, size)
                if not moved:
                    raise OSError(f"the data channel took nothing of a {size}-byte frame")
                size -= moved
        else:
            _write_all(self.fd, views)
        self.last_sent = time.monotonic()

    def send(self, kind, payload=b""):
        """`payload`: any buffer, sent before this returns (a command's output is a view of the
        agent's read buffer, command.py)."""
        with self.lock:
            for start in range(0, max(len(payload), 1), frames.MAX_PAYLOAD):
                part = payload[start:start + frames.MAX_PAYLOAD]
                self._write(frames.header_of(kind, self.seq, part), part)
                self.seq += 1

    def send_json(self, kind, obj):
        with self.lock:
            self._write(frames.encode_json(kind, self.seq, obj))
            self.seq += 1

    def send_file_raw(self, path):
        """One frame whose payload is copied by `cat`: the benchmark's raw baseline.
        The log frame marks the start for the host, after the CRC pass has read the file."""
        size = os.path.getsize(path)
        crc = zlib.crc32(b"raw %d %d" % (self.seq + 1, size))
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                crc = zlib.crc32(block, crc)
        self.send("log", b"raw copy follows")
        self._write(frames.header("raw", self.seq, size, crc))
        self.seq += 1
        subprocess.run(["cat", path], stdout=self.fd, check=True)


class ticking:
    """Ticks from a second thread while the agent does something long of its own (copying a
    large entry in, making a big home's filesystem, writing the home disk back): the host
    must not take a busy agent for a dead one and charge a retry to nobody."""

    def __init__(self, channel, heartbeat):
        self.channel, self.heartbeat = channel, heartbeat
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._tick, daemon=True)

    def _tick(self):
        while not self.done.wait(self.heartbeat):
            self.channel.send("tick")

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()
        return False


def open_channel(kind):
    if kind == "uart":
        path = "/dev/ttyS1"
    else:
        def find_port():
            ports = "/sys/class/virtio-ports"
            for port in sorted(os.listdir(ports)) if os.path.isdir(ports) else []:
                with open(os.path.join(ports, port, "name")) as f:
                    if f.read().strip() == PORT_NAME:
                        return "/dev/" + port
            return None
        path = wait_for(find_port, 20)
        if path is None:
            raise SystemExit(f"vmjudge agent: no virtio port named {PORT_NAME}")
        wait_for(path, 5)
    os.chown(path, 0, 0)
    os.chmod(path, 0o600)  # the entry user must never reach the channel
    # Read too: a warm-started VM is woken by a line the host writes (wake.py).
    fd = os.open(path, os.O_RDWR | os.O_NOCTTY)
    if os.isatty(fd):
        import termios
        import tty
        tty.setraw(fd)  # cooked mode would turn \n into \r\n
        attrs = termios.tcgetattr(fd)
        attrs[1] &= ~termios.OPOST
        termios.tcsetattr(fd, termios.TCSANOW, attrs)
    return fd
