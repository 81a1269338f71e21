"""segment2025 sample: an entry that loads a model larger than the VM's memory. Its own process is
killed by the kernel's OOM killer inside the entry's memory cgroup (never the judge's agent), and
its quiz fails at the first training record (quiz-error)."""

blocks = []
while True:
    blocks.append(bytearray(32 << 20))  # zeroed, so each block is really there
