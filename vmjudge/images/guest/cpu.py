"""The CPU this guest was given, as its own kernel reports it, for the hello frame.

What an entry can use is what the guest sees, not what the host has or what site.toml asked
for: qemu drops a feature the accelerator cannot give, and the kernel hides one it does not
enable. So the agent reads /proc/cpuinfo before any entry command runs, and the host records
the model and the flags in the stage's manifest (vm/hardware.py). Every vCPU of a guest is
given the same model, so the first processor's lines stand for all. The path is an argument,
so that the host's tests can read a saved cpuinfo.
"""

CPUINFO = "/proc/cpuinfo"
READ_BYTES = 65536  # the first processor's lines are well within this


def read_cpu(path=CPUINFO):
    """{"model": the first "model name" or None, "flags": its "flags" words, in the kernel's order}."""
    try:
        with open(path, "rb") as f:
            text = f.read(READ_BYTES).decode("utf-8", "replace")
    except OSError:
        return {"model": None, "flags": []}
    model, flags = None, None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and model is None:
            model = value.strip()
        elif key == "flags" and flags is None:
            flags = value.split()
        if model is not None and flags is not None:
            break
    return {"model": model, "flags": flags or []}
