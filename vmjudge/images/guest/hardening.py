"""What the agent sets once per job, before any entry command: the guest kernel's hardening
and the entry's memory cgroup, under which each command gets a cgroup of its own (usage.py;
the limits each command is then held to are run_guard's)."""

import os

from run_guard import CGROUPS, ENTRY_CGROUP
from system import JobError, run_quiet

# Kept for the kernel, the agent and the page cache of the programs running (or a tenth, if more):
# above what a booted guest uses (about 68 MiB in a 512 MiB VM, 25 of it page cache), so an entry
# filling its cgroup meets its own cap, and its OOM kill, before the VM runs short. With 64 MiB the
# cap lay beyond the VM's free memory: the kernel reclaimed the page cache of the very programs
# running, the entry's python refaulted its code from the squashfs root under emulation, and the
# agent went unheard for 15 s and more (a channel-silent infrastructure failure for the entry's doing).
ENTRY_MEMORY_RESERVE = 128 << 20

# Defence in depth for the kernel the entry shares with the agent (the channel's only guard
# is guest root). Set once the home is mounted (ext4 and its checksum module are loaded by
# then) and before any entry command: no user namespaces (an entry's "root" in one reaches
# kernel code no unprivileged user should), no more module loading, System V shared memory
# removed with its last user, the kernel's link protections (busybox init applies no
# sysctl.d), and the kernel log and addresses kept from unprivileged eyes.
HARDENING = (
    ("user/max_user_namespaces", "0", True),
    ("kernel/unprivileged_userns_clone", "0", False),  # Debian's kernels only
    ("kernel/shm_rmid_forced", "1", True),
    ("fs/protected_hardlinks", "1", True),
    ("fs/protected_symlinks", "1", True),
    ("fs/protected_fifos", "2", False),
    ("fs/protected_regular", "2", False),
    ("kernel/dmesg_restrict", "1", False),
    ("kernel/kptr_restrict", "2", False),
    ("kernel/perf_event_paranoid", "3", False),
    # Little dirty data, so the home disk is written back within moments of the last command.
    ("vm/dirty_bytes", str(32 << 20), False),
    ("vm/dirty_background_bytes", str(8 << 20), False),
    ("kernel/modules_disabled", "1", True),  # last: it cannot be undone
)


def harden():
    for key, value, required in HARDENING:
        try:
            with open("/proc/sys/" + key, "w") as f:
                f.write(value)
        except OSError as exc:
            if required:
                raise JobError(f"cannot set {key.replace('/', '.')}={value} in the guest: {exc}") from None


def entry_memory_limit():
    with open("/proc/meminfo") as f:
        total = int(f.readline().split()[1]) * 1024  # MemTotal, in KiB
    return total - max(ENTRY_MEMORY_RESERVE, total // 10)


def make_entry_cgroup():
    """The cgroup of the entry's commands, with a memory cap below the VM's: what they use is
    reclaimed, and the largest of them OOM-killed, inside it, while the agent's memory is left
    alone. Without it, a command that ate all memory stalled the whole guest for over a minute
    on the way to the OOM killer; the agent's ticks stopped, and the host took the entry's own
    doing for a silent channel, an infrastructure failure retried at no cost to the entry.
    Files it writes to /tmp and /dev/shm are charged to it too."""
    try:
        if not os.path.ismount(CGROUPS):
            run_quiet(["mount", "-t", "cgroup2", "-o", "nosuid,nodev,noexec", "cgroup2", CGROUPS])
        with open(CGROUPS + "/cgroup.subtree_control", "w") as f:
            f.write("+memory +pids")
        os.makedirs(ENTRY_CGROUP, exist_ok=True)
        with open(ENTRY_CGROUP + "/memory.max", "w") as f:
            f.write(str(entry_memory_limit()))
        # Each command runs in a child of its own, which measures it (usage.py).
        with open(ENTRY_CGROUP + "/cgroup.subtree_control", "w") as f:
            f.write("+memory +pids")
    except OSError as exc:
        raise JobError(f"cannot make the entry's memory cgroup: {exc}") from None
    # The cpu controller too, where the kernel has it (cpu.stat's usage needs none).
    for group in (CGROUPS, ENTRY_CGROUP):
        try:
            with open(group + "/cgroup.subtree_control", "w") as f:
                f.write("+cpu")
        except OSError:
            break
