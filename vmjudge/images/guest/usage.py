"""What one entry command used, measured by the guest kernel in a cgroup of its own.

Each entry command runs in a fresh child of the entry's cgroup (hardening.py caps memory on
the parent), so its figures are its own and those of everything it started: CPU time from
cpu.stat (kept for processes that have ended), the high-water marks memory.peak and
pids.peak (a short spike between two samples is not missed), and the OOM kills from
memory.events. They are read after the command and all it started were killed, and the
cgroup is then removed. While it runs, its CPU time and memory.current are sampled over time
(samples.py). Measured here because only the guest kernel sees the entry's
processes; the host adds the VM's own CPU and wall time, which the guest cannot alter.
"""

import os
import time

from run_guard import ENTRY_CGROUP
from system import JobError


class CommandCgroup:
    def __init__(self, index):
        self.path = f"{ENTRY_CGROUP}/command-{index}"
        try:
            os.mkdir(self.path)
        except FileExistsError:  # left by an earlier command that could not be removed: never reused
            self.path += f"-{time.monotonic_ns()}"
            os.mkdir(self.path)
        except OSError as exc:
            raise JobError(f"cannot make the cgroup of entry command {index}: {exc}") from None

    def figures(self):
        """The command's figures; one that cannot be read is None (never a guess)."""
        cpu = _keyed(self.path + "/cpu.stat").get("usage_usec")
        return {"cpu_seconds": None if cpu is None else cpu / 1e6,
                "peak_memory": _number(self.path + "/memory.peak"),
                "oom_kills": _keyed(self.path + "/memory.events").get("oom_kill"),
                "processes": _number(self.path + "/pids.peak")}

    def sample(self):
        """(CPU seconds, memory bytes) now, from cpu.stat and memory.current: a sample of the
        command's series (samples.py); None when either cannot be read."""
        cpu = _keyed(self.path + "/cpu.stat").get("usage_usec")
        memory = _number(self.path + "/memory.current")
        return None if cpu is None or memory is None else (cpu / 1e6, memory)

    def kill(self):
        """SIGKILL every process in the cgroup, whatever its user (cgroup.kill): the backstop after
        a command of the entry's root, whose processes the kill sweep finds by their user."""
        try:
            with open(self.path + "/cgroup.kill", "w") as f:
                f.write("1")
        except OSError:
            pass  # gone already, or a kernel without cgroup.kill: the sweep by user still runs

    def remove(self, tries=50):
        """Remove the cgroup once its last process is gone (killed and reaped by the caller;
        a process still exiting keeps it populated for a moment)."""
        for _ in range(tries):
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.01)


def _number(path):
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _keyed(path):
    try:
        with open(path) as f:
            return {k: int(v) for k, v in (line.split() for line in f if len(line.split()) == 2)}
    except (OSError, ValueError):
        return {}


def job_figures(home):
    """What the bye frame says of the whole job: the bytes used on the home disk's file system
    at its end (as df counts them), and the memory cap the entry's commands were held to."""
    try:
        st = os.statvfs(home)
        used = (st.f_blocks - st.f_bfree) * st.f_frsize
    except OSError:
        used = None
    return {"home_used": used, "memory_max": _number(ENTRY_CGROUP + "/memory.max")}
