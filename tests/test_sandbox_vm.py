"""The sandbox core with real VMs: libvirt, qemu (TCG), the real guest image, pyserial."""

from __future__ import annotations

import hashlib
import os
from dataclasses import replace
from pathlib import Path

import pytest

from vmjudge.config import VmShape, load_challenge, load_site
from vmjudge.errors import InfrastructureError
from vmjudge.files import sha256_file
from vmjudge.images.guest import frames
from vmjudge.images.runtime import describe_runtime
from vmjudge.vm.job import Command, Job
from vmjudge.vm.reading import Limits
from vmjudge.vm.runner import make_overlay

from .conftest import output

MIB = 1 << 20
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def sh(name: str, script: str, timeout: float = 20, user: str = "entry", **kw) -> Command:
    return Command(name, ("sh", "-c", script), timeout, user=user, **kw)


def test_one_mib_of_binary_output_arrives_intact(boot, rundir):
    payload = os.urandom(MIB) + bytes(range(256)) * 4 + b"\r\n\n\x00\x1b"
    (rundir / "payload.bin").write_bytes(payload)
    job = Job(commands=(Command("cat", ("cat", "payload.bin"), 60, output_limit=2 * MIB,
                                links=("data/payload.bin",)),),
              media={"data/payload.bin": rundir / "payload.bin"})
    run = boot(job)
    cmd = run.transcript.commands[0]
    assert cmd.status == "ok"
    assert cmd.output_bytes == len(payload)
    assert hashlib.sha256(cmd.output).hexdigest() == hashlib.sha256(payload).hexdigest()
    assert run.transcript.hello["nonce"] and run.iso_sha256


def test_the_runtime_the_judge_writes_is_what_the_guest_reports(boot, image, site):
    """#58: `vmjudge challenge show` (and the challenge page) describe the guest from the image's manifest and the
    challenge's VM; a command in that VM reports the same Python, Debian release, vCPUs, and memory (the
    kernel keeps some of the VM's: /proc/meminfo, which `free -m` reads, shows a little less)."""
    ch = replace(load_challenge(EXAMPLES / "minimal"), vm=VmShape(vcpus=1, memory_mib=512, home_mib=128))  # boot's
    runtime = describe_runtime(ch, image.manifest, site)
    run = boot(Job(commands=(sh("facts", "python3 --version; cat /etc/debian_version; nproc; "
                                         "awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo; uname -r; "
                                         "dpkg-query -W -f '${Version}\\n' python3"),)))
    python, debian, nproc, total, kernel, package = output(run).split("\n")[:6]
    assert python == f"Python {runtime.python}" and runtime.debian == f"{debian} (bookworm)"
    assert package == image.manifest["packages"]["python3"]  # the versions the page lists are the installed ones
    assert int(nproc) == runtime.vcpus == 1 and kernel == runtime.kernel
    assert 0.8 * runtime.memory_mib < int(total) <= runtime.memory_mib
    assert runtime.entry_memory_mib < int(total)  # what the entry's commands get together lies below what the guest has


def test_only_network_interface_is_loopback_and_entropy_comes_from_virtio_rng(boot):
    run = boot(Job(commands=(sh("net", "ls /sys/class/net"),
                             sh("rng", "cat /sys/class/misc/hw_random/rng_current; "
                                       "head -c 16 /dev/hwrng 2>/dev/null | wc -c", user="root"))))
    assert output(run).split() == ["lo"]
    assert output(run, 1).split() == ["virtio_rng.0", "16"]  # the device, and it gives bytes


def test_entry_user_cannot_touch_root_fs_or_channel(boot):
    files = "/etc/passwd /opt/vmjudge/agent.py /opt/vmjudge/frames.py /usr/bin/python3"
    attempts = [
        "touch /usr/bin/planted", "echo x >> /etc/passwd", "echo x > /opt/vmjudge/agent.py",
        "rm -f /opt/vmjudge/frames.py", "mkdir /root/x", "cat /sys/class/virtio-ports/*/name >/dev/null && "
        "cat /dev/vport*p* > /dev/null", "echo x > /dev/vport1p1", "echo x > /dev/sr0",
        "echo x > /dev/vda", "echo x > /dev/vdb",
    ]
    script = "".join(f"if ( {a} ) 2>/dev/null; then echo ALLOWED: {a!r}; else echo denied; fi\n"
                     for a in attempts)
    run = boot(Job(commands=(
        sh("before", f"sha256sum {files}; id -u"),
        sh("attack", script),
        sh("after", f"sha256sum {files}; ls -l /dev/vport*p*"),
        Command("channel", ("python3", "-c", "import glob, os\ntry: os.open(glob.glob('/dev/vport*p*')[0], "
                            "os.O_WRONLY)\nexcept OSError as e: print(e.strerror)"), 20),
    )))
    before, attack, after, channel = (output(run, i) for i in range(4))
    assert channel == "Permission denied\n"
    assert attack.split() == ["denied"] * len(attempts), attack
    assert before.splitlines()[-1] == "1000"
    assert before.splitlines()[:4] == after.splitlines()[:4]
    port_line = after.splitlines()[-1]
    assert port_line.startswith("crw-------") and " root root " in port_line


def test_command_past_its_limit_is_killed_with_everything_it_started(boot):
    count_entry_procs = ("exec python3 -c \"import os; print(' '.join(open('/proc/'+p+'/stat').read().split()[2] "
                         "for p in os.listdir('/proc') if p.isdigit() and os.stat('/proc/'+p).st_uid == 1000))\"")
    run = boot(Job(commands=(
        sh("forever", "setsid sleep 1000 & (trap '' TERM; while :; do :; done) & echo started; wait", timeout=3),
        sh("count", count_entry_procs),
    )))
    forever, count = run.transcript.commands
    assert forever.status == "timeout"
    assert forever.exit_code == -9  # SIGKILL'd at its limit; the run guard's reap once made this 0 (#32 item 11)
    assert forever.seconds >= 3  # killed at its limit, not before (the cause is the status above)
    assert bytes(forever.output) == b"started\n"
    assert count.status == "ok"
    assert output(run, 1).split() == ["R"]  # only the listing python itself: no process, no zombie


def test_hung_guest_is_destroyed_at_the_host_deadline(boot, conn):
    job = Job(commands=(sh("stop-agent", "kill -STOP $PPID", user="root"), sh("never", "echo never")))
    with pytest.raises(InfrastructureError) as err:
        boot(job, limits=Limits(boot_timeout=120, silence_timeout=3000, deadline=20))
    assert err.value.reason == "guest-deadline"  # whether the agent said hello before it stopped or not
    assert "host deadline of 20 s" in str(err.value)


def test_silent_channel_is_an_infrastructure_error(boot, tmp_path):
    """The silence limit here is site.toml's (the job sets none of its own)."""
    (tmp_path / "site.toml").write_text("[libvirt]\nsilence_timeout = 8\n")
    job = Job(commands=(sh("stop-agent", "kill -STOP $PPID", user="root"),))
    with pytest.raises(InfrastructureError) as err:
        boot(job, limits=Limits(boot_timeout=120), site=load_site(tmp_path))
    assert err.value.reason == "channel-silent"
    assert "silent for 8 s while command 0 (stop-agent) ran" in str(err.value)  # the organiser's first clue


def test_guest_crash_is_reported_not_hung(boot):
    job = Job(commands=(sh("panic", "echo c > /proc/sysrq-trigger", user="root"),))
    with pytest.raises(InfrastructureError) as err:
        boot(job)
    assert err.value.reason == "guest-stopped"


def test_a_vm_that_cannot_start_is_an_infrastructure_error_and_leaves_nothing(boot, rundir):
    """Its home disk vanished before the start (say, a cleanup gone wrong): libvirt refuses."""
    job = Job(commands=(sh("never", "echo never ran"),))
    with pytest.raises(InfrastructureError) as err:
        boot(job, home=rundir / "no-such-home.qcow2")
    assert err.value.reason == "vm-start"
    assert "the VM would not start" in str(err.value) and "no-such-home.qcow2" in str(err.value)
    assert not list(rundir.glob("*.iso"))


def test_home_disk_persists_and_overlay_writes_stay_in_overlay(boot, rundir):
    home = boot.blank_home()
    first = boot(Job(commands=(sh("write", "echo kept > kept.txt; echo done"),)), home=home)
    assert output(first) == "done\n"
    # root's alone (0600): libvirt lent it to its qemu user for the run, and gave it back
    assert (home.stat().st_mode & 0o777, home.stat().st_uid) == (0o600, 0)
    backing_sha = sha256_file(home)

    overlay = rundir / "overlay1.qcow2"
    make_overlay(overlay, home)
    assert overlay.stat().st_mode & 0o777 == 0o600
    second = boot(Job(commands=(sh("read", "cat kept.txt; echo scratch > scratch.txt; ls"),)), home=overlay)
    assert output(second) == "kept\nkept.txt\nscratch.txt\n"
    assert sha256_file(home) == backing_sha

    fresh = rundir / "overlay2.qcow2"
    make_overlay(fresh, home)
    third = boot(Job(commands=(sh("list", "ls"),)), home=fresh)
    assert output(third) == "kept.txt\n"


def test_output_is_capped_and_result_files_come_back(boot):
    job = Job(commands=(
        Command("big", ("sh", "-c", "head -c 3145728 /dev/zero; printf 'R,1\\n' > 100.txt"), 60,
                output_limit=MIB, collect=("100.txt", "missing.txt")),
    ))
    cmd = boot(job).transcript.commands[0]
    assert cmd.status == "ok"
    assert cmd.output_bytes == 3 * MIB
    assert len(cmd.output) == MIB and cmd.truncated
    assert cmd.files["100.txt"].data == b"R,1\n"
    assert cmd.files["missing.txt"].size is None


def test_output_keeps_a_head_and_a_tail_and_counts_the_middle(boot):
    script = "head -c 3145728 /dev/zero | tr '\\000' h; head -c 100000 /dev/zero | tr '\\000' t; echo END"
    cmd = boot(Job(commands=(sh("big", script, timeout=60, output_limit=MIB, tail_limit=4096),))).transcript.commands[0]
    assert cmd.output_bytes == 3 * MIB + 100000 + 4
    assert bytes(cmd.output) == b"h" * MIB and bytes(cmd.tail) == b"t" * 4092 + b"END\n"
    assert cmd.omitted == 2 * MIB + 100000 - 4092 and cmd.truncated and not cmd.host_capped


def test_limits_hold_after_the_command_closes_its_output(boot):
    """exec >&- 2>&- closes the pipe the agent reads: the deadline still holds, ticks still
    come (the host's silence limit is shorter than the sleep), and the leftovers are killed."""
    job = Job(commands=(sh("closed", "exec >&- 2>&-; setsid sleep 1000 & sleep 1000", timeout=5),
                        sh("closed-ok", "exec >&- 2>&-; sleep 2; exit 0", timeout=20),
                        sh("count", "grep -l '^Name:.sleep' /proc/[0-9]*/status 2>/dev/null | wc -l")))
    run = boot(job, limits=Limits(boot_timeout=120, silence_timeout=4))
    closed, closed_ok, count = run.transcript.commands
    assert closed.status == "timeout" and closed.seconds >= 5
    assert closed_ok.status == "ok" and closed_ok.seconds >= 2  # ended by its exit, not its 20 s limit
    assert output(run, 2) == "0\n"


def test_an_entry_cannot_stop_the_agent_or_silence_it(boot):
    """A process that SIGSTOPs everything of its user must not stop the agent's kill sweep, and
    output past the head (not sent) must not stop the ticks: either would let the host take the
    agent for dead (channel-silent) and retry the entry's own doing as infrastructure."""
    spinner = ("setsid python3 -c 'import os, signal\nwhile True:\n try: os.kill(-1, signal.SIGSTOP)\n"
               " except OSError: pass' </dev/null >/dev/null 2>&1 &")
    job = Job(commands=(sh("stopper", spinner + " sleep 100", timeout=4),  # stops itself too: its timeout
                        sh("trickle", "head -c 70000 /dev/zero; for i in 1 2 3 4 5 6 7 8 9 10; do echo; sleep 1; done",
                           timeout=30, output_limit=65536),
                        sh("after", "echo still here")))
    run = boot(job, limits=Limits(boot_timeout=120, silence_timeout=5))
    assert [(c.name, c.status) for c in run.transcript.commands] == [
        ("stopper", "timeout"), ("trickle", "ok"), ("after", "ok")]
    assert output(run, 2) == "still here\n"


def test_guest_hardening_holds_for_the_entry(boot):
    """The nonce in job.json is root's; no user namespaces, no module loading; System V
    shared memory dies with the command that made it; setuid gives nothing."""
    job = Job(commands=(
        sh("job.json", "cat /media/cdrom/job.json >/dev/null 2>&1 && echo read || echo denied"),
        sh("job.json-root", "head -c 1 /media/cdrom/job.json", user="root"),
        sh("userns", "unshare -Ur true 2>/dev/null && echo made || echo refused"),
        sh("sysctl", "cat /proc/sys/kernel/modules_disabled /proc/sys/user/max_user_namespaces "
                     "/proc/sys/kernel/shm_rmid_forced /proc/sys/fs/protected_hardlinks"),
        sh("shm-leave", "python3 -c 'import ctypes; libc = ctypes.CDLL(None); libc.shmat.restype = ctypes.c_void_p; "
                        "i = libc.shmget(0, 1 << 20, 0o1600); ctypes.memset(libc.shmat(i, None, 0), 1, 1 << 20)'; "
                        "ipcmk -M 4096 >/dev/null; readlink /proc/self/ns/ipc"),
        sh("shm-after", "ipcs -m | grep -c entry; true"),
        sh("ipc-agent", "readlink /proc/1/ns/ipc", user="root"),
        sh("no-new-privs", "grep NoNewPrivs /proc/self/status"),
    ))
    run = boot(job)
    assert [output(run, i) for i in (0, 1, 2, 3, 5, 7)] == [
        "denied\n", "{", "refused\n", "1\n0\n1\n1\n", "0\n", "NoNewPrivs:\t1\n"]
    command_ipc, agent_ipc = output(run, 4), output(run, 6)
    assert command_ipc.startswith("ipc:[") and agent_ipc.startswith("ipc:[") and command_ipc != agent_ipc


def test_what_the_entry_leaves_in_its_home_is_its_own_fault_never_the_agents(boot, rundir):
    """A directory where a record file is linked, a linked directory on the way to a result
    file, a FIFO as a result file, a lost+found that is a link: each fails the command or
    gives no file, and the agent carries on (no infrastructure error)."""
    (rundir / "rec.dat").write_bytes(b"data\n")
    home = boot.blank_home()
    boot(Job(commands=(sh("plant", "rmdir lost+found 2>/dev/null; mkdir e rec.dat; ln -s e lost+found; "
                                   "ln -s /media/cdrom out; mkfifo fifo.txt"),)), home=home)
    run = boot(Job(commands=(
        sh("linked", "echo ran", links=("data/rec.dat",)),
        sh("results", "true", collect=("out/job.json", "fifo.txt")),
        sh("after", "ls -ld lost+found | cut -c1"),
    ), media={"data/rec.dat": rundir / "rec.dat"}), home=home)
    linked, results, after = run.transcript.commands
    assert linked.status == "error" and "could not link the record file rec.dat" in linked.message
    assert results.status == "ok"
    assert results.files["out/job.json"].size is None and results.files["fifo.txt"].size is None
    assert output(run, 2) == "l\n"


def test_failing_command_stops_the_job_when_asked(boot):
    job = Job(commands=(sh("ok", "echo one"), sh("fail", "echo two; exit 3"), sh("skipped", "echo three")),
              stop_on_failure=True)
    run = boot(job)
    assert [(c.name, c.status, c.exit_code) for c in run.transcript.commands] == [("ok", "ok", 0),
                                                                              ("fail", "error", 3)]
    assert run.transcript.bye["commands"] == 2


def test_entry_is_installed_into_home_with_its_modes(boot, rundir):
    entry = rundir / "entry"
    entry.mkdir()
    (entry / "setup.sh").write_text("#!/bin/sh\necho set up as $(id -un) in $(pwd)\n")
    (entry / "setup.sh").chmod(0o755)
    (entry / "data.txt").write_text("x")
    run = boot(Job(commands=(Command("setup", ("./setup.sh",), 20), sh("ls", "ls -l setup.sh data.txt")),
                   media={"entry": entry}, install="entry"))
    assert output(run) == "set up as entry in /home/entry\n"
    listing = output(run, 1).splitlines()
    assert listing[0].startswith("-rw-r--r-- 1 entry entry") and listing[1].startswith("-rwxr-xr-x 1 entry entry")


def test_malformed_job_json_is_reported_by_the_agent(boot, monkeypatch):
    monkeypatch.setattr(Job, "job_json", lambda self, nonce, gpu=False, seed=None, data_disks=False:
                        b'{"protocol": %d, "nonce": "%s", "commands": [{"argv": 5}]}'
                        % (frames.PROTOCOL, nonce.encode()))
    with pytest.raises(InfrastructureError) as err:
        boot(Job(commands=(sh("x", "true"),)))
    assert err.value.reason == "agent-error"
    assert "command 0 has no argv list of strings" in str(err.value)


def test_unreadable_job_json_is_reported_by_the_agent(boot, monkeypatch):
    monkeypatch.setattr(Job, "job_json", lambda self, nonce, gpu=False, seed=None, data_disks=False:
                        b"{this is not json")
    with pytest.raises(InfrastructureError) as err:
        boot(Job(commands=(sh("x", "true"),)))
    assert err.value.reason == "agent-error"
    assert "job.json is not valid JSON" in str(err.value)


def test_garbage_on_the_channel_is_a_clear_error(boot, uart_site):
    # A virtio port admits one opener (the agent); the UART can be opened twice, so root
    # can interleave garbage with the agent's frames there.
    job = Job(commands=(sh("garbage", "printf 'NOT A FRAME\\n' > /dev/ttyS1; sleep 30", user="root"),))
    with pytest.raises(InfrastructureError) as err:
        boot(job, site=uart_site)
    assert err.value.reason == "channel-broken"
    assert "not a frame header" in str(err.value)


def test_uart_channel_carries_the_same_results(boot, uart_site):
    payload_cmd = "python3 -c \"import sys; sys.stdout.buffer.write(bytes(range(256))*64)\""
    run = boot(Job(commands=(sh("bytes", payload_cmd),)), site=uart_site)
    cmd = run.transcript.commands[0]
    assert cmd.status == "ok"
    assert bytes(cmd.output) == bytes(range(256)) * 64


def test_the_entrys_limits_are_measured_from_inside(boot):
    """The participants' guide's numbers ("Stages and verdicts"), observed by the entry rather than
    read from the agent's source: at most 1024 processes (a spawner stops at the limit, not for
    memory); /tmp, /var/tmp (the root's writable layer) and /dev/shm of 20 %, 20 % and 10 % of the
    VM's memory; the entry's commands in a memory cgroup capped 128 MiB below the VM's memory; eating all of it, the
    entry's process is OOM-killed while the agent keeps ticking, and carries on. The run allows the
    agent 4 s of silence, two heartbeats, where production's default is 60 s: while the entry made
    the kernel zero its pages, a 1-vCPU guest under Debian's default "voluntary" preemption ran
    nothing else for 2.5-6.5 s (a real-time probe in it as long as the agent), 3.5-8.5 s and twice
    past 15 s in full suite runs while the guest's CPU had ERMS (guest_cpu.TCG_SLOW); fully
    preemptible (domain_xml.GUEST_KERNEL_ARGS) the agent's longest silence was its 2 s tick (#33,
    measured 2026-11-27, docs/development.md).

    And what each command used, from its own cgroup (#20): 300 MiB touched shows a peak of at
    least that and below the VM's memory; a CPU burner's CPU time is its wall time within 20 %;
    a sleeper's is near 0; the OOM kill is counted; the spawner's processes; the VM's CPU time
    from libvirt; the job's memory cap and home disk used."""
    spawner = ("python3 -c 'import errno, os\nn = 0\nwhile True:\n try: os.posix_spawn(\"/bin/sleep\", "
               "[\"sleep\", \"1000\"], os.environ)\n except OSError as e: print(n, errno.errorcode[e.errno]); break\n"
               " n += 1'")
    job = Job(commands=(
        sh("nproc", "grep 'Max processes' /proc/self/limits | tr -s ' '"),
        sh("spawn", spawner, timeout=120),
        sh("sizes", "grep MemTotal /proc/meminfo | tr -s ' ' | cut -d' ' -f2; "
                    "df -k /tmp /var/tmp /dev/shm | tail -n 3 | tr -s ' ' | cut -d' ' -f2"),
        sh("cgroup", "cat /proc/self/cgroup /sys/fs/cgroup/entry/memory.max"),
        sh("oom", "grep oom_kill /proc/vmstat; exec python3 -c 'l = []\nwhile True: l.append(bytearray(8 << 20))'",
           timeout=120),
        sh("after", "grep oom_kill /proc/vmstat; echo agent alive"),
        sh("touch", "exec python3 -c 'b = bytearray(300 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1'",
           timeout=120),
        sh("burn", "exec python3 -c 'import time\nt = time.monotonic()\nwhile time.monotonic() - t < 3: pass'"),
        sh("sleep", "exec sleep 3"),
    ))
    run = boot(job, limits=Limits(boot_timeout=120, silence_timeout=4))
    nproc, spawn, sizes, cgroup, oom, after, touch, burn, sleeper = run.transcript.commands
    assert output(run, 0) == "Max processes 1024 1024 processes \n"
    started, error = output(run, 1).split()
    # The user's processes count: the agent's shell and python are two of the 1024.
    assert error == "EAGAIN" and 1000 <= int(started) <= 1022, output(run, 1)
    mem, tmp, var_tmp, shm = (int(v) for v in output(run, 2).split())
    for size, share in ((tmp, 0.20), (var_tmp, 0.20), (shm, 0.10)):
        assert abs(size - share * mem) <= 4, (size, share, mem)  # tmpfs rounds to 4 KiB pages
    cap = mem * 1024 - (128 << 20)
    assert output(run, 3) == f"0::/entry/command-3\n{cap}\n"
    assert oom.status == "error" and oom.exit_code == -9, (oom.status, oom.exit_code, oom.message)
    kills_before = int(output(run, 4).split()[1])
    kills_after, alive = output(run, 5).splitlines()
    assert int(kills_after.split()[1]) > kills_before and alive == "agent alive"
    assert touch.status == "ok" and 300 * MIB <= touch.usage["peak_memory"] < 512 * MIB, touch.usage
    assert burn.status == "ok" and abs(burn.usage["cpu_seconds"] - burn.seconds) <= 0.2 * burn.seconds, \
        (burn.usage, burn.seconds)
    assert sleeper.seconds >= 3 and sleeper.usage["cpu_seconds"] < 0.1 * sleeper.seconds, sleeper.usage
    assert oom.usage["oom_kills"] >= 1 and oom.usage["peak_memory"] >= 0.9 * cap, oom.usage
    assert burn.usage["oom_kills"] == 0 and touch.usage["processes"] == 1
    assert spawn.usage["processes"] >= 1000, spawn.usage
    assert run.transcript.bye["memory_max"] == cap and run.transcript.bye["home_used"] > 0
    assert run.cpu_seconds is not None and run.cpu_seconds > burn.usage["cpu_seconds"]
