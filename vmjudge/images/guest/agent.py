"""The vmjudge guest agent: reads job.json from the CD-ROM, runs it, reports over serial.

It runs as root inside the judge's VM (started by /opt/vmjudge/init, which powers the
machine off when the agent exits, whatever happened). This file is the job loop: the job
read and checked, the home made ready, each command run in turn (command.py), and every
failure framed for the host. Entry code runs as the unprivileged user `entry` in its own
session, confined and ended by the run guard (run_guard.py): when a command ends or its
wall-time limit passes, its session is killed and then every process the entry user still
has, so nothing an entry starts outlives its command. The host enforces every limit again
from outside.

The hello frame says what CPU the guest was given (cpu.py: the model and flags of its
/proc/cpuinfo) and what GPU the VM has (gpu.py). A GPU stage's job says "gpu": true; if the
card does not work there, the agent runs nothing and says so as the GPU's fault, which the
host takes for the infrastructure's (the slot is taken out of service), never the entry's. A
container entry's commands on such a stage see the card as a CUDA container does (root_gpu.py).

On the replica ISO the same agent runs the same jobs with `--replica`: the frames go to
its standard output (a pipe read by `vmjudge-replica check`, which prepared the home
directory and the job's files at /media/cdrom), and the home is left mounted for the caller;
a container entry's root is the loop device the caller names (`--entry-root-device=DEV`), where
the judge's VM has a disk.

Only the standard library is used: these files (copied beside each other to /opt/vmjudge)
must run on the guest's Python as they are. Modules needed only on some paths (ctypes,
shutil, termios) are imported where used: every import is paid at each boot, before the
first frame, under emulation.
"""

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import frames
import gpu
from channel import Channel, open_channel, ticking
from command import Command, run_command
from cpu import read_cpu
from hardening import harden, make_entry_cgroup
from media import CDROM, HOME, install, mount_cdrom, mount_home
from run_guard import become_subreaper, protect_from_oom
from system import EntryFault, JobError
from usage import job_figures
from wake import reseed, wait_for_wake

AGENT_VERSION = "1.10"


def kernel_args():
    try:
        with open("/proc/cmdline") as f:
            words = f.read().split()
    except OSError:
        return {}
    return dict(w.split("=", 1) for w in words if w.startswith("vmjudge.") and "=" in w)


def boot_marks(started, imported):
    """Where a cold boot went, in the guest's clock (seconds since its kernel started): the end of each
    step the inits marked (VMJUDGE_BOOT: the initramfs's init, its modules, the root mounted, the
    stage-2 init, Python started), the agent's first line (`started`, from init's command line) and its
    imports done; greet adds the hello. For bench/boot.py; nothing of the entry's, as none has run."""
    marks = {}
    for word in os.environ.get("VMJUDGE_BOOT", "").split():
        name, _, value = word.partition("=")
        try:
            marks[name] = float(value)
        except ValueError:
            continue
    if started is not None:
        marks["agent"] = started
    marks["imported"] = imported
    return marks


def read_job():
    path = os.path.join(CDROM, "job.json")
    try:
        with open(path, "rb") as f:
            job = json.loads(f.read().decode("utf-8"))
    except OSError as exc:
        raise JobError(f"cannot read job.json from the CD-ROM: {exc}") from None
    except ValueError as exc:
        raise JobError(f"job.json is not valid JSON: {exc}") from None
    return job


def check_job(job):
    """The host builds jobs, but a damaged CD must be refused, not half-run."""
    if not isinstance(job, dict):
        raise JobError("job.json must hold a JSON object")
    if job.get("protocol") != frames.PROTOCOL:
        raise JobError(f"job.json protocol {job.get('protocol')!r} is not {frames.PROTOCOL}")
    if "seed" in job:
        try:
            bytes.fromhex(job["seed"])
        except (TypeError, ValueError):
            raise JobError("job.json's seed is not a hexadecimal string") from None
    commands = job.get("commands")
    if not isinstance(commands, list):
        raise JobError("job.json has no list of commands")
    for i, cmd in enumerate(commands):
        if not isinstance(cmd, dict):
            raise JobError(f"command {i} is not an object")
        argv = cmd.get("argv")
        if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)):
            raise JobError(f"command {i} has no argv list of strings")
        for key in ("timeout", "output_limit"):
            if not isinstance(cmd.get(key), (int, float)) or cmd[key] <= 0:
                raise JobError(f"command {i} needs a positive {key}")
        if cmd.get("user", "entry") not in ("entry", "root"):
            raise JobError(f"command {i} has unknown user {cmd.get('user')!r}")
        if cmd.get("root") is not None:
            check_root_command(job, i, cmd)
        if cmd.get("cwd") is not None and (not isinstance(job.get("code"), dict)
                                           or cmd["cwd"] != job["code"].get("path") or cmd.get("user") != "entry"):
            raise JobError(f"command {i} runs in a directory that is not the job's code directory")
        if cmd.get("steps") is not None or (isinstance(job.get("code"), dict) and job["code"].get("stepped")):
            from code_dir import check_steps
            check_steps(job, i, cmd)


def check_root_command(job, i, cmd):
    """A command of the entry's own root: the job must have one, and the command is the entry's."""
    from root_spec import RootSpec
    if job.get("entry_root") is not True:
        raise JobError(f"command {i} runs in the entry's root, and the job has none")
    if cmd.get("user", "entry") != "entry" or cmd.get("links"):
        raise JobError(f"command {i} runs in the entry's root: as the entry, with no links")
    try:
        RootSpec(cmd["root"])
    except JobError as exc:
        raise JobError(f"command {i}: {exc}") from None


def greet(channel, job, found, warm=False, boot=None):
    """The hello frame, with the GPU the VM has (and a cold boot's marks); False (and an error frame)
    when the job is a GPU stage's and its card does not work, so that no entry command runs without it."""
    hello = {"nonce": job.get("nonce"), "agent": AGENT_VERSION, "protocol": frames.PROTOCOL, "gpu": found,
             "warm": warm, "cpu": read_cpu()}
    if boot is not None:
        hello["boot"] = {**boot, "hello": time.clock_gettime(time.CLOCK_BOOTTIME)}
    channel.send_json("hello", hello)
    if job.get("gpu") is True and found.get("state") != "ok":
        channel.send_json("error", {"message": f"the GPU passed to this VM did not work: {found.get('why')}",
                                    "fault": "gpu"})
        return False
    return True


def probe_gpu():
    try:
        return gpu.probe()
    except Exception as exc:  # noqa: BLE001 - a probe that breaks is a GPU that cannot be trusted, not a dead agent
        return {"state": "failed", "why": f"the agent's GPU probe failed: {type(exc).__name__}: {exc}"}


def replica_device():
    """The entry root's loop device the replica's runner gives (--entry-root-device=/dev/loopN)."""
    for arg in sys.argv[1:]:
        if arg.startswith("--entry-root-device=/dev/loop"):
            return arg.split("=", 1)[1]
    return None


def run_job(channel, job, home_ready=False):
    heartbeat = float(job.get("heartbeat", 2))
    with ticking(channel, heartbeat):
        if not home_ready:
            mount_home(channel)
            harden()
        make_entry_cgroup()
        if job.get("data_disks"):  # the record sets, each over its directory of the CD
            from root_disk import mount_data_disks
            mount_data_disks(job["data_disks"])
        if job.get("install"):
            install(job["install"])
        if job.get("code"):  # a submission's runtime layout (DrivenData's /code_execution), after its home
            from code_dir import mount_code_dir
            mount_code_dir(job["code"])
        gpu_view = meter = None
        if job.get("gpu") is True:  # the card was found working (greet): its memory sampled with the cgroup's
            from gpu_memory import open_meter
            meter = open_meter()
        if job.get("entry_root") is True:  # a container entry's: its commands run in it
            from root_disk import mount_entry_root, mount_tmp_disk
            mount_entry_root(replica_device() if home_ready else None)
            if job.get("tmp_disk") is True and not home_ready:  # the replica has none: /tmp in the layers
                mount_tmp_disk()
            if job.get("gpu") is True:  # the card was found working (greet): shown the toolkit's way
                from root_gpu import find_view
                gpu_view = find_view()
    if job.get("raw_copy"):
        channel.send_file_raw(os.path.join(CDROM, job["raw_copy"]))
    done = 0
    for index, spec in enumerate(job["commands"]):
        if spec.get("steps"):  # a stepped submission's: its data is the steps so far (code_dir.py)
            from code_dir import enter_step
            enter_step(job["code"], spec["steps"], spec.get("collect", []))
        status = run_command(channel, index, Command(spec, heartbeat), gpu_view, meter)
        done += 1
        if status != "ok" and job.get("stop_on_failure", False):
            break
    return done


def main(started=None):
    """`started`: the guest's clock when init's Python ran its first line, before this module's imports."""
    imported = time.clock_gettime(time.CLOCK_BOOTTIME)
    replica = "--replica" in sys.argv[1:]
    args = kernel_args()
    fd = sys.stdout.fileno() if replica else open_channel(args.get("vmjudge.channel", "virtio"))
    channel = Channel(fd)
    warm = args.get("vmjudge.warm") == "1" and not replica
    if warm:
        wait_for_wake(channel)  # the VM is saved here, and each restore of it resumes here
    job = None
    try:
        mount_cdrom(medium_wait=20 if warm else 0)
        job = read_job()
        check_job(job)
        if "seed" in job:
            reseed(bytes.fromhex(job["seed"]))  # the job's own randomness, on a cold boot too
    except JobError as exc:
        nonce = job.get("nonce") if isinstance(job, dict) else None
        channel.send_json("hello", {"nonce": nonce, "agent": AGENT_VERSION, "protocol": frames.PROTOCOL})
        channel.send_json("error", {"message": str(exc)})
        channel.send_json("bye", {"commands": 0})
        return
    boot = None if warm or replica else boot_marks(started, imported)
    if not greet(channel, job, probe_gpu(), warm, boot):
        channel.send_json("bye", {"commands": 0})
        return
    done = 0
    figures = {}
    try:
        become_subreaper()
        protect_from_oom()
        done = run_job(channel, job, home_ready=replica)
    except EntryFault as exc:
        channel.send_json("error", {"message": str(exc), "fault": "entry", "reason": exc.reason})
    except JobError as exc:
        channel.send_json("error", {"message": str(exc)})
    except Exception as exc:  # noqa: BLE001 - whatever went wrong is reported to the host, then init powers off
        channel.send_json("error", {"message": f"agent failure: {type(exc).__name__}: {exc}"})
    finally:
        if os.path.ismount(HOME):
            figures = job_figures(HOME)
        if os.path.ismount(HOME) and not replica:
            with ticking(channel, float(job.get("heartbeat", 2))):
                os.sync()
                subprocess.run(["umount", HOME])
    channel.send_json("bye", {"commands": done, **figures})


if __name__ == "__main__":
    main()
