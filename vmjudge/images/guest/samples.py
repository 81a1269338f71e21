"""A command's use over time: its cgroup's CPU seconds and memory, sampled while it runs.

The command loop (command.py watch) wakes for the next sample as it wakes for a heartbeat: no
thread. Samples are due on a grid of `interval` seconds from the command's start, one per slot
at most (a slot the loop was too busy for stays empty), and one more when it ends. A long command
keeps a bounded, evenly spaced series: once the grid holds `limit - 1` samples, every other slot is
dropped and the interval doubled, so an hour's case keeps as many samples as a minute's.
`read` gives (CPU seconds, memory bytes) now, or None (usage.py reads the cgroup), and on a GPU
stage the card's memory in use as a third figure (gpu_memory.py); the host's tests drive this
with their own.
"""

INTERVAL = 0.5  # seconds between samples at first
LIMIT = 120  # samples at most, the last (the command's end) included


class Series:
    def __init__(self, read, interval=INTERVAL, limit=LIMIT):
        self.read = read
        self.interval = float(interval)
        self.limit = int(limit)
        self.grid = []  # [slot, seconds, cpu_seconds, memory_bytes(, gpu_memory_bytes)]; slot: seconds // interval
        self.last = None  # the sample taken at the command's end
        self.next_at = 0.0

    def wait(self, elapsed):
        """Seconds from `elapsed` (since the command's start) until the next sample is due (none
        after the end's)."""
        return float("inf") if self.last is not None else max(self.next_at - elapsed, 0.0)

    def tick(self, elapsed):
        """Sample if one is due `elapsed` seconds after the start; a reading that fails leaves its
        slot empty."""
        if self.last is not None or elapsed < self.next_at:
            return
        slot = int(elapsed // self.interval)
        reading = self.read()
        if reading is not None and not (self.grid and slot <= self.grid[-1][0]):
            self.grid.append([slot, elapsed, *reading])
            while len(self.grid) > self.limit - 1:
                self.grid = [[s // 2, *rest] for s, *rest in self.grid if s % 2 == 0]
                self.interval *= 2
        self.next_at = (int(elapsed // self.interval) + 1) * self.interval

    def end(self, elapsed):
        """The sample at the command's end, taken once, whatever its slot."""
        if self.last is None:
            reading = self.read()
            self.last = [] if reading is None else [elapsed, *reading]

    def rows(self):
        """[[seconds, cpu_seconds, memory_bytes(, gpu_memory_bytes)], ...] in time order, as the end
        frame carries them."""
        taken = [rest for _, *rest in self.grid]
        if self.last and (not taken or self.last[0] > taken[-1][0]):
            taken.append(self.last)
        return [[round(t, 3), round(c, 6), *rest] for t, c, *rest in taken]


def with_gpu(read, meter):
    """A sampler's read that adds the card's memory in use to (CPU seconds, memory bytes); a reading
    NVML does not answer for keeps the two (the host draws the GPU's line where it has figures)."""
    if meter is None:
        return read

    def both():
        reading = read()
        used = None if reading is None else meter.used()
        return reading if used is None else (*reading, used)
    return both
