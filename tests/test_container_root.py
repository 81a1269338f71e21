"""Commands of a container entry, run in the entry's own root (#39): real VMs, the real guest image,
and entry roots made here as the host makes them, a squashfs of a root file system (a busybox-static
tree: no Docker needed). Each test shows one promise of vm/job.py InRoot and guest/root_*.py with an
image that would break it if the promise did not hold: the image's files and not the guest's, a PID
namespace of its own, a user that is not root whatever the image says, a fresh /tmp and output per
command, the input read-only, nothing kept of what a command writes elsewhere, no network, no disk
device, nothing of the image run by the agent, no link of the image's followed by the agent's
mounts, the entry's memory cgroup and time limit, on a warm restore and a cold boot alike."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from vmjudge.files import sha256_file
from vmjudge.vm.job import Command, InRoot, Job

from .conftest import output
from .needs import cannot_run

MARKER = "the entry's image"
APP_UID = 1234  # the image's own user, in its /etc/passwd
ENTRY_UID = 1000  # the guest's entry user: what an image's root runs as
HOSTILE = "#!/bin/busybox sh\necho hacked\n(echo hacked >> /hacked.log) 2>/dev/null\nexit 0\n"


def static_busybox() -> Path:
    found = shutil.which("busybox")
    # A dynamic busybox would find no libc in the image (busybox-static: vmjudge/host/setup-host --tools).
    if found is None or subprocess.run(["ldd", found], capture_output=True).returncode == 0:
        cannot_run("a static busybox is needed to make the test image: apt-get install busybox-static")
    return Path(found)


def image_tree(root: Path) -> Path:
    """A small image: busybox and its applets, its own accounts, a marker, a directory its user owns,
    things in /tmp and /output that a command must not see, and an empty /sys (Docker's are)."""
    busybox = static_busybox()
    (root / "bin").mkdir(parents=True)
    shutil.copyfile(busybox, root / "bin" / "busybox")
    (root / "bin" / "busybox").chmod(0o755)
    applets = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, check=True).stdout.split()
    for applet in applets:
        if applet != "busybox":
            (root / "bin" / applet).symlink_to("busybox")
    for d in ("etc", "tmp", "output", "sys", "usr/bin", "data"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "etc" / "passwd").write_text(f"root:x:0:0:root:/root:/bin/sh\napp:x:{APP_UID}:{APP_UID}::/data:/bin/sh\n")
    (root / "etc" / "group").write_text(f"root:x:0:app\napp:x:{APP_UID}:\nstaff:x:50:\ndata:x:60:nobody,app\n")
    (root / "etc" / "marker").write_text(MARKER + "\n")
    (root / "tmp" / "image-tmp-file").write_text("the image's /tmp\n")
    (root / "output" / "stale.txt").write_text("the image's /output\n")
    os.chown(root / "data", APP_UID, APP_UID)
    (root / "tmp").chmod(0o1777)
    return root


def squash(tree: Path, path: Path) -> Path:
    subprocess.run(["mksquashfs", str(tree), str(path), "-noappend", "-quiet", "-no-progress", "-comp", "lz4"],
                   check=True)
    path.chmod(0o600)  # root's, as the host keeps an entry's root; libvirt lends it to its qemu user for a run
    shutil.rmtree(tree)
    return path


@pytest.fixture
def plain_root(rundir) -> Path:
    return squash(image_tree(rundir / "plain"), rundir / "plain.sqfs")


def sh(name: str, script: str, timeout: float = 30, root: InRoot | None = None, **kw) -> Command:
    return Command(name, ("sh", "-c", script), timeout, root=root or InRoot(), **kw)


def guest(name: str, script: str) -> Command:
    """The judge's own check, as root in the guest (not in the entry's root)."""
    return Command(name, ("sh", "-c", script), 30, user="root")


def statuses(run) -> list[tuple[str, str]]:
    return [(c.name, c.status) for c in run.transcript.commands]


def test_a_command_sees_the_images_files_and_only_its_own_processes(boot, plain_root):
    run = boot(Job(commands=(
        sh("inside", "cat /etc/marker; test -e /opt/vmjudge/agent.py && echo guest-files || echo no-guest-files; "
                     "tr '\\0' ' ' < /proc/1/cmdline; echo; ls -d /proc/[0-9]* | wc -l; "
                     "grep -l 'agent[.]main' /proc/[0-9]*/cmdline | wc -l; "
                     "for ns in pid ipc mnt; do readlink /proc/self/ns/$ns; done"),
        guest("guest", "for ns in pid ipc mnt; do readlink /proc/self/ns/$ns; done; "
                       "grep -c 'agent[.]main' /proc/$PPID/cmdline"),
    ), entry_root=plain_root))
    assert statuses(run) == [("inside", "ok"), ("guest", "ok")]
    marker, files, cmdline, processes, agents, *namespaces = output(run).splitlines()
    assert (marker, files) == (MARKER, "no-guest-files")
    # The first process of its PID namespace is the command itself, and it sees only its own
    # (the shell, ls and wc of that line, grep not yet): not the agent, not the guest's init.
    assert cmdline.startswith("sh -c cat /etc/marker"), cmdline
    assert int(processes) <= 4 and agents == "0", (processes, agents)
    *guest_namespaces, agent_seen = output(run, 1).splitlines()
    assert agent_seen == "1"  # the guest's own check does see the agent: the grep above could find it
    for inside, outside in zip(namespaces, guest_namespaces, strict=True):
        assert inside != outside and inside.split(":")[0] == outside.split(":")[0], (inside, outside)


def test_the_images_user_runs_as_itself_and_root_as_the_entry_user(boot, plain_root):
    ids = "echo $(id -u) $(id -g) $(id -G); grep NoNewPrivs /proc/self/status"
    users = ("", "root", "0:0", "app", f"{APP_UID}", f"{APP_UID}:0", "app:staff", "4321")
    run = boot(Job(commands=(
        *(sh(f"user {u!r}", ids, root=InRoot(user=u)) for u in users),
        sh("ghost", "echo ran", root=InRoot(user="ghost")),
        sh("environment", "echo $FOO $PATH $HOME; pwd; touch mine && ls -ln mine | tr -s ' ' | cut -d' ' -f3,4",
           root=InRoot(user="app", env=("FOO=bar baz", "PATH=/bin"), workdir="/data")),
        sh("home", "echo $HOME; df -k /dev/shm | tail -1 | tr -s ' ' | cut -d' ' -f2; grep MemTotal /proc/meminfo",
           root=InRoot(user="4321")),
        sh("no workdir", "pwd", root=InRoot(workdir="/nowhere")),
        Command("no program", ("no-such-program",), 30, root=InRoot()),
        sh("after", "echo after"),
    ), entry_root=plain_root))
    seen = {c.name.removeprefix("user "): output(run, i).splitlines() for i, c in enumerate(run.transcript.commands)
            if c.name.startswith("user ")}
    entry = [f"{ENTRY_UID} {ENTRY_UID} {ENTRY_UID}", "NoNewPrivs:\t1"]
    # The image's user with its supplementary groups from the image's /etc/group (root's 0 never), as Docker
    # gives them, unless the user names its group.
    app = [f"{APP_UID} {APP_UID} {APP_UID} 60", "NoNewPrivs:\t1"]
    assert seen == {"''": entry, "'root'": entry, "'0:0'": entry, "'app'": app, f"'{APP_UID}'": app,
                    f"'{APP_UID}:0'": [f"{APP_UID} {ENTRY_UID} {ENTRY_UID}", "NoNewPrivs:\t1"],
                    "'app:staff'": [f"{APP_UID} 50 50", "NoNewPrivs:\t1"],
                    "'4321'": [f"4321 {ENTRY_UID} {ENTRY_UID}", "NoNewPrivs:\t1"]}
    ghost, environment, home, no_workdir, no_program, after = run.transcript.commands[len(users):]
    assert ghost.status == "error" and "the image's user 'ghost' is not in its /etc/passwd" in ghost.message
    assert environment.status == "ok"
    # HOME is the user's home in the image's /etc/passwd ("/" for a uid it lacks), as Docker gives it.
    assert output(run, len(users) + 1).splitlines() == ["bar baz /bin /data", "/data", f"{APP_UID} {APP_UID}"]
    no_home, shm_kib, memory = output(run, len(users) + 2).splitlines()
    assert home.status == "ok" and no_home == "/"
    assert 0.45 < int(shm_kib) / int(memory.split()[1]) < 0.55  # /dev/shm is half the memory, as Grand Challenge's
    assert no_workdir.status == "error" and "the working directory /nowhere" in no_workdir.message
    assert no_program.status == "error" and "could not start no-such-program" in no_program.message
    assert after.status == "ok" and output(run, len(users) + 5) == "after\n"  # the job goes on after those


def test_tmp_and_output_start_empty_and_nothing_written_elsewhere_lasts(boot, plain_root):
    write = ("ls -A /tmp /output; echo one > /tmp/a; echo one > /data/kept; echo one > /output/result.txt; "
             "ls -A /data")
    after = "ls -A /tmp /output /data; cat /etc/marker"
    image = sha256_file(plain_root)
    run = boot(Job(commands=(
        sh("write", write, root=InRoot(user="app"), collect=("result.txt", "../upper/data/kept")),
        sh("after", after, root=InRoot(user="app"), collect=("result.txt",)),
        guest("guest", "ls -A /home/entry/.vmjudge-root; find /home/entry -name kept | wc -l"),
    ), entry_root=plain_root))
    assert statuses(run) == [("write", "ok"), ("after", "ok"), ("guest", "ok")]
    assert output(run) == "/output:\n\n/tmp:\nkept\n"  # not the image's /tmp file, nor its stale /output
    first, second = run.transcript.commands[:2]
    assert first.files["result.txt"].data == b"one\n"
    assert first.files["../upper/data/kept"].size is None  # only the output is sent back
    assert second.files["result.txt"].size is None
    assert output(run, 1) == f"/data:\n\n/output:\n\n/tmp:\n{MARKER}\n"
    assert output(run, 2) == "0\n"  # the layers are gone from the home disk, and kept was in them only
    assert sha256_file(plain_root) == image  # and the host's image is as it was


def test_the_input_is_the_commands_own_files_and_read_only(boot, plain_root, rundir):
    media = {}
    for record in ("100", "101"):
        for ext in ("dat", "hea"):
            (rundir / f"{record}.{ext}").write_text(f"{record} {ext}\n")
            media[f"quiz/{record}.{ext}"] = rundir / f"{record}.{ext}"
    look = "ls -A /input; cat /input/*; for f in /input/x /input/100.dat; do (echo x > $f) 2>/dev/null " \
           "&& echo WROTE $f; done; grep ' /input' /proc/self/mounts | cut -d' ' -f4 | cut -d, -f1 | sort -u"
    run = boot(Job(commands=tuple(
        sh(f"record {r}", look, root=InRoot(input_files=(f"quiz/{r}.dat", f"quiz/{r}.hea"))) for r in ("100", "101")
    ) + (sh("whole set", "ls -A /data/in; cat /data/in/101.hea; touch /data/in/x 2>/dev/null || echo read-only",
            root=InRoot(input="/data/in", input_dir="quiz")),), media=media, entry_root=plain_root))
    assert statuses(run) == [("record 100", "ok"), ("record 101", "ok"), ("whole set", "ok")]
    assert output(run, 0) == "100.dat\n100.hea\n100 dat\n100 hea\nro\n"
    assert output(run, 1) == "101.dat\n101.hea\n101 dat\n101 hea\nro\n"
    assert output(run, 2) == "100.dat\n100.hea\n101.dat\n101.hea\n101 hea\nread-only\n"


def test_no_network_no_disk_no_channel_and_no_mount_of_the_guests_in_the_root(boot, plain_root):
    run = boot(Job(commands=(
        sh("net", "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '"),
        sh("dev", "ls -A /dev; find / -path /proc -prune -o -type b -print | wc -l; ls -A /sys | wc -l; "
                  "cat /dev/vda /dev/sr0 /dev/vport0p1 2>&1 | grep -c 'No such file'"),
        sh("mounts", "cut -d' ' -f5 /proc/self/mountinfo"),
    ), entry_root=plain_root))
    assert output(run, 0) == "lo\n"
    assert output(run, 1).splitlines() == ["fd", "full", "null", "random", "shm", "stderr", "stdin", "stdout", "tty",
                                           "urandom", "zero", "0", "0", "3"]
    # The root's own mounts and nothing of the guest's: its root was detached, not merely hidden.
    assert output(run, 2).splitlines() == ["/", "/dev", "/dev/shm", "/input", "/output", "/proc"]


def test_a_hostile_image_runs_nothing_of_its_own_as_the_agent(boot, rundir):
    """Its python3, sh, mount, umount, pivot_root and env print "hacked": the agent runs none of
    them (it mounts with system calls, and starts only the command), so the job is the agent's.
    Its own device nodes (the guest's first disk, its kernel memory) open for nobody: nodev."""
    tree = image_tree(rundir / "hostile")
    os.mknod(tree / "disk", stat.S_IFBLK | 0o666, os.makedev(254, 0))
    os.mknod(tree / "mem", stat.S_IFCHR | 0o666, os.makedev(1, 1))
    for name in ("usr/bin/python3", "bin/python3", "usr/bin/env", "bin/sh", "bin/mount", "bin/umount",
                 "bin/pivot_root", "bin/chroot", "sbin/mount", "usr/bin/mount"):
        path = tree / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        path.write_text(HOSTILE)
        path.chmod(0o4755)  # setuid root, for all the good it does on a nosuid mount with no new privileges
    root = squash(tree, rundir / "hostile.sqfs")
    bb = ("/bin/busybox", "sh", "-c")
    run = boot(Job(commands=(
        Command("python3", ("python3", "-c", "print('agent')"), 30, root=InRoot()),
        Command("whoami", (*bb, "id -u; ls -A /output; head -c 1 /disk /mem 2>&1 | grep -c 'Permission denied'"), 30,
                root=InRoot()),
        guest("guest", "python3 -c 'print(\"the guest python\")'; ls /hacked.log /tmp/hacked.log 2>&1 | "
                       "grep -c 'No such file'"),
    ), entry_root=root))
    assert statuses(run) == [("python3", "ok"), ("whoami", "ok"), ("guest", "ok")]
    assert output(run, 0) == "hacked\n"  # the entry's own python3, as the entry: its own doing
    assert output(run, 1) == f"{ENTRY_UID}\n2\n"
    assert output(run, 2) == "the guest python\n2\n"
    hello, bye = run.transcript.hello, run.transcript.bye
    assert hello["agent"] and hello["nonce"] and bye["commands"] == 3


def test_links_in_the_image_do_not_lead_the_agents_mounts_out_of_the_root(boot, rundir):
    """The image's /output is a link to /etc, its /tmp to /, its /dev and /proc to /etc, its input
    directory to /: had the agent's mounts followed them, the output would have been bound on the
    guest's /etc (and nothing sent back), /tmp would be the guest's root, and so on."""
    tree = image_tree(rundir / "links")
    for name, target in (("output", "/etc"), ("tmp", "/"), ("dev", "/etc"), ("proc", "/etc"), ("input", "/")):
        path = tree / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        path.symlink_to(target)
    root = squash(tree, rundir / "links.sqfs")
    run = boot(Job(commands=(
        sh("linked", "ls -A /tmp /output /input; echo mine > /output/result.txt; echo t > /tmp/t; "
                     "test -L /output || echo output-is-a-directory; tr '\\0' ' ' < /proc/1/cmdline | cut -c1-5; "
                     "echo > /dev/null && echo null-works", collect=("result.txt",)),
        guest("guest", "ls /etc/result.txt /t /tmp/t 2>&1 | grep -c 'No such file'"),
    ), entry_root=root))
    assert statuses(run) == [("linked", "ok"), ("guest", "ok")]
    assert output(run) == "/input:\n\n/output:\n\n/tmp:\noutput-is-a-directory\nsh -c\nnull-works\n"
    assert run.transcript.commands[0].files["result.txt"].data == b"mine\n"
    assert output(run, 1) == "3\n"


def test_the_memory_cgroup_and_the_time_limit_hold_in_the_root(boot, plain_root):
    # Just below the VM's memory (so the allocation itself is granted) and above the entry's cap.
    eat = "m=$(grep MemTotal /proc/meminfo | tr -s ' ' | cut -d' ' -f2); " \
          "exec dd if=/dev/zero of=/dev/null bs=$((m - 16384))k count=1"
    run = boot(Job(commands=(
        sh("cgroup", "cat /proc/self/cgroup"),
        sh("oom", eat, timeout=120),
        sh("forever", "setsid sleep 1000 & sleep 1000", timeout=3, root=InRoot(user="app")),
        guest("left", "for p in /proc/[0-9]*; do stat -c %u $p; done 2>/dev/null | "
                      f"grep -c -x -e {ENTRY_UID} -e {APP_UID}; true"),
    ), entry_root=plain_root))
    cgroup, oom, forever, left = run.transcript.commands
    assert output(run, 0) == "0::/entry/command-0\n"
    assert oom.status == "error" and oom.exit_code == -9, (oom.status, oom.exit_code, output(run, 1))
    assert oom.usage["oom_kills"] >= 1 and oom.usage["peak_memory"] >= 0.9 * run.transcript.bye["memory_max"]
    assert forever.status == "timeout" and forever.exit_code == -9 and forever.seconds >= 3
    # Its shell and the setsid sleep at least (busybox's shell may run the last sleep itself).
    assert cgroup.status == "ok" and forever.usage["processes"] >= 2, forever.usage
    assert left.status == "ok" and output(run, 3) == "0\n"  # nothing of either user outlived its command


def test_the_entry_root_is_given_on_a_warm_restore_and_on_a_cold_boot(boot, plain_root, site):
    job = Job(commands=(sh("marker", "cat /etc/marker"),), entry_root=plain_root)
    warm = boot(job)
    cold = boot(job, site=replace(site, warm_start=False))
    assert warm.start["mode"] == "warm" and cold.start["mode"] == "cold", (warm.start, cold.start)
    assert output(warm) == output(cold) == MARKER + "\n"
    # libvirt leaves a read-only disk to its qemu user after a run; run_job gives it back to root.
    st = plain_root.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o600)


def test_a_job_json_says_what_the_host_decided_and_nothing_of_the_host():
    root = InRoot(user="app", env=("A=1",), workdir="/w", input_files=("quiz/1.dat",))
    job = Job(commands=(Command("c", ("run",), 10, root=root, collect=("1.out",)),), entry_root=Path("/x/root.sqfs"))
    doc = json.loads(job.job_json("n"))
    assert doc["entry_root"] is True and "/x/root.sqfs" not in job.job_json("n").decode()
    assert doc["commands"][0]["root"] == {"user": "app", "env": ["A=1"], "workdir": "/w", "input": "/input",
                                          "output": "/output", "input_files": ["quiz/1.dat"], "input_dir": None}
    plain = Job(commands=(Command("c", ("run",), 10),)).job_json("n")
    assert b"root" not in plain and b"entry_root" not in plain  # an archive entry's job.json is as it was


@pytest.mark.parametrize("kw, message", [
    ({"output": "/"}, "absolute path"), ({"input": "/proc/x"}, "may not be under"), ({"output": "/a/../b"}, ".."),
    ({"input": "/data", "output": "/data/out"}, "overlap"), ({"env": ("NOEQUALS",)}, "NAME=value"),
    ({"input_files": ("a/x", "b/x")}, "share a name"), ({"input_files": ("../job.json",)}, "on the CD"),
    ({"input_dir": "."}, "on the CD"), ({"user": "a:b:c"}, "not a user"), ({"workdir": "rel"}, "absolute"),
])
def test_an_in_root_the_agent_could_not_carry_out_is_refused_on_the_host(kw, message):
    with pytest.raises(ValueError, match=message):
        InRoot(**kw)


def test_a_command_in_the_root_needs_the_jobs_entry_root_and_runs_as_the_entry():
    with pytest.raises(ValueError, match="no entry_root"):
        Job(commands=(Command("c", ("run",), 10, root=InRoot()),))
    for kw in ({"user": "root"}, {"links": ("quiz/1.dat",)}):
        with pytest.raises(ValueError, match="runs in the entry's root"):
            Command("c", ("run",), 10, root=InRoot(), **kw)
