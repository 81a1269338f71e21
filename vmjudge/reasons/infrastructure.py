"""Reasons the judge's own machinery failed to run a stage."""

from __future__ import annotations

from .reason import Reason

REASONS: tuple[Reason, ...] = (
    Reason(
        code="entry-root", fault="infrastructure", where="prep",
        means="A tool making a container entry's root file system on the host (skopeo, umoci, unsquashfs, a mount) "
              "failed on an image that passed admission.",
        remedy="Read the tool's last words in `vmjudge show ID --organiser`, fix the host (for example "
               "`modprobe loop`), then `vmjudge rescore CHALLENGE --entries ID --rerun-stages`.",
    ),
    Reason(
        code="entry-root-timeout", fault="infrastructure", where="prep",
        means="Making a container entry's root file system on the host, or mounting its scratch file system, ran past "
              "its deadline.",
        remedy="Check the host's disk and load, then run a parked entry again with "
               "`vmjudge rescore CHALLENGE --entries ID --rerun-stages`.",
    ),
    Reason(
        code="data-disk", fault="infrastructure", where="quiz or exam",
        means="A record set's data disk could not be made, or a record file changed meanwhile; a record file no disk "
              "can hold is the challenge's fault, and holds the entry at once.",
        remedy="Rename a record file the message names in the challenge directory and run `vmjudge challenge add` "
               "again; otherwise check the host's disk.",
    ),
    Reason(
        code="entry-root-missing", fault="infrastructure", where="quiz or exam",
        means="The root file system stage 1 made for a container entry is missing, or is not the size stage 1 "
              "recorded.",
        remedy="Run the entry again from stage 1 with `vmjudge rescore CHALLENGE --entries ID --rerun-stages`.",
    ),
    Reason(
        code="results-missing", fault="infrastructure", where="score",
        means="Stage 4 found no archived stage-3 results for the entry, or found them damaged.",
        remedy="Run the entry again with `vmjudge rescore CHALLENGE --entries ID --rerun-stages`.",
    ),
    Reason(
        code="agent-error", fault="infrastructure", where="any stage",
        means="The judge's agent inside the VM could not carry out the job, for a reason that was not the entry's.",
        remedy="Read the agent's message and the console log in `vmjudge show ID --organiser` and fix the cause.",
    ),
    Reason(
        code="channel-broken", fault="infrastructure", where="any stage",
        means="The data channel between the judge and the VM's agent could not be opened or written, closed while the "
              "VM ran, or carried a malformed frame.",
        remedy="Read the console log in `vmjudge show ID --organiser`, and check libvirt and the host if it recurs.",
    ),
    Reason(
        code="channel-silent", fault="infrastructure", where="any stage",
        means="The VM's agent sent nothing for longer than the silence limit ([libvirt] silence_timeout in "
              "site.toml).",
        remedy="Read the console log for a hang or a crash; raise silence_timeout if the guest is only slow.",
    ),
    Reason(
        code="daemon-stopped", fault="infrastructure", where="any stage",
        means="The daemon stopped unexpectedly (a crash, or the host went down) while the stage ran; its next start "
              "queued the stage again.",
        remedy="Find why the daemon stopped in its log (`journalctl -u vmjudge`).",
    ),
    Reason(
        code="daemon-stopping", fault="infrastructure", where="any stage",
        means="The daemon was stopped on purpose while the stage ran; the stage is queued again and not counted as a "
              "failure.",
        remedy="Nothing: the next daemon runs the stage again.",
    ),
    Reason(
        code="gpu-guest", fault="infrastructure", where="any stage",
        means="The GPU lent to the VM did not work inside it before any entry command ran, so its slot was taken out "
              "of service.",
        remedy="Look at the card, then put its slot back with `vmjudge gpu enable ADDRESS`.",
    ),
    Reason(
        code="gpu-preflight", fault="infrastructure", where="any stage",
        means="A GPU failed its preflight check before its VM started, so its slot was taken out of service.",
        remedy="Fix what `vmjudge doctor` says of the card, then put its slot back with `vmjudge gpu enable ADDRESS`.",
    ),
    Reason(
        code="gpu-start", fault="infrastructure", where="any stage",
        means="The VM would not start with its GPU (for example a failed reset), so the card's slot was taken out of "
              "service.",
        remedy="Fix what `vmjudge doctor` says of the card, then put its slot back with `vmjudge gpu enable ADDRESS`.",
    ),
    Reason(
        code="guest-cpu", fault="infrastructure", where="any stage",
        means="The guest's CPU reported less than the challenge's [vm] cpu_level, although libvirt said this host's "
              "guests reach it.",
        remedy="Set [vm] cpu in site.toml to a CPU that reaches the level, and check it with "
               "`vmjudge doctor --challenge DIR`.",
    ),
    Reason(
        code="guest-deadline", fault="infrastructure", where="any stage",
        means="The VM ran past the host's deadline (its boot, the stage's time and a grace) and was destroyed.",
        remedy="Read the console log in `vmjudge show ID --organiser` for a guest that hung or ran too slowly.",
    ),
    Reason(
        code="guest-no-hello", fault="infrastructure", where="any stage",
        means="The guest did not report within the boot limit ([libvirt] boot_timeout in site.toml); it may not have "
              "booted.",
        remedy="Read the console log and check that VMs boot with `vmjudge doctor`; raise boot_timeout on a slow "
               "host.",
    ),
    Reason(
        code="guest-stopped", fault="infrastructure", where="any stage",
        means="The VM stopped before its agent finished: a crash, a kernel panic or a reboot.",
        remedy="Read the console log named in `vmjudge show ID --organiser`.",
    ),
    Reason(
        code="host-disk", fault="infrastructure", where="any stage",
        means="The host could not unpack the entry, or make a VM's disk with qemu-img or mkfs.ext4.",
        remedy="Check the host's disk, and the tool's message in `vmjudge show ID --organiser`.",
    ),
    Reason(
        code="host-disk-full", fault="infrastructure", where="any stage",
        means="The host's disk ran out of space for a VM's disks, a data disk, a container entry's root or the "
              "stage's files.",
        remedy="Free space where the vmjudge home is, for example with `vmjudge gc`.",
    ),
    Reason(
        code="host-io", fault="infrastructure", where="any stage",
        means="Reading or writing a VM's disks, or the stage's files, failed on the host for a reason other than a "
              "full disk.",
        remedy="Check the host's disk and its kernel log (`dmesg`).",
    ),
    Reason(
        code="host-lost", fault="infrastructure", where="any stage",
        means="The host running the stage stopped renewing its claim on the entry, so a daemon's sweep queued the "
              "stage again.",
        remedy="Check that host and its daemon (`vmjudge status` lists the hosts).",
    ),
    Reason(
        code="host-tools", fault="infrastructure", where="any stage",
        means="A tool the judge needs on the host, qemu-img or mkfs.ext4, is not installed.",
        remedy="Install it with `make setup`, or `apt-get install qemu-utils e2fsprogs`.",
    ),
    Reason(
        code="image-altered", fault="infrastructure", where="any stage",
        means="A file of the guest image no longer matches its sha256 in the image's manifest.",
        remedy="Delete the image's directory and build it again with `vmjudge image build`.",
    ),
    Reason(
        code="image-missing", fault="infrastructure", where="any stage",
        means="The guest image for the challenge's recipe, or one of its files, cannot be found (for example after an "
              "upgrade of vmjudge).",
        remedy="Build it with `vmjudge challenge add DIR` or `vmjudge image build`, or bring it with "
               "`vmjudge image import`.",
    ),
    Reason(
        code="internal-error", fault="infrastructure", where="any stage",
        means="A bug in vmjudge itself stopped the stage; its traceback is in the daemon's log.",
        remedy="Report the traceback (`journalctl -u vmjudge`) to vmjudge's developers; once fixed, "
               "`vmjudge rescore CHALLENGE --entries ID --rerun-stages`.",
    ),
    Reason(
        code="libvirt-unreachable", fault="infrastructure", where="any stage",
        means="The judge lost touch with libvirt, or libvirt would not answer, and it did not come back in time.",
        remedy="Check libvirt with `systemctl status libvirtd`, and restart it if needed.",
    ),
    Reason(
        code="replica", fault="infrastructure", where="any stage",
        means="In the replica (the participants' copy of the judge), a mount, tar or loop-device step of the check "
              "failed.",
        remedy="Run `vmjudge-replica check` as root in the booted replica; if it still fails, rebuild the replica "
               "with `vmjudge replica build`.",
    ),
    Reason(
        code="setup-problem", fault="infrastructure", where="any stage",
        means="The judge's own setup is incomplete: the guest image or the challenge's directory is missing or moved, "
              "or the host has no libvirt-qemu group.",
        remedy="Fix what the message says (for example `vmjudge challenge add DIR`), then check the host with "
               "`vmjudge doctor`.",
    ),
    Reason(
        code="store-damaged", fault="infrastructure", where="any stage",
        means="A blob fetched from the object store no longer matches its sha256, so it was refused.",
        remedy="Copy the good file (named by its sha256 in a host's spool or HOME/archive/sha256) over the object the "
               "message names.",
    ),
    Reason(
        code="store-missing", fault="infrastructure", where="any stage",
        means="The object store has no blob (an entry's archive or results) that the queue lists.",
        remedy="Put it back from a host that still has a copy, or run the entry again with "
               "`vmjudge rescore CHALLENGE --entries ID --rerun-stages`.",
    ),
    Reason(
        code="store-refused", fault="infrastructure", where="any stage",
        means="The object store refused the judge's credentials, or has no such bucket.",
        remedy="Check [storage] url and credentials_file in site.toml (or AWS_ACCESS_KEY_ID and "
               "AWS_SECRET_ACCESS_KEY), and create the bucket.",
    ),
    Reason(
        code="store-unavailable", fault="infrastructure", where="any stage",
        means="The object store did not answer in time, answered with an error, or sent a blob too slowly.",
        remedy="Check the store and the network to it, and [storage] in site.toml.",
    ),
    Reason(
        code="vm-device", fault="infrastructure", where="any stage",
        means="A warm start failed, as libvirt would not give the restored VM one of its disks; the run then boots "
              "cold instead, so an entry rarely carries this reason.",
        remedy="Read why in the stage's manifest (its start); set [libvirt] warm_start = false in site.toml if it "
               "recurs.",
    ),
    Reason(
        code="vm-restore", fault="infrastructure", where="any stage",
        means="A warm start failed, as libvirt would not restore the saved VM; the run then boots cold instead, so an "
              "entry rarely carries this reason.",
        remedy="Read why in the stage's manifest (its start); set [libvirt] warm_start = false in site.toml if it "
               "recurs.",
    ),
    Reason(
        code="vm-save", fault="infrastructure", where="any stage",
        means="Saving a booted VM for warm starts failed, as libvirt would not save it; the run then boots cold "
              "instead, so an entry rarely carries this reason.",
        remedy="Read why in the stage's manifest (its start); set [libvirt] warm_start = false in site.toml if it "
               "recurs.",
    ),
    Reason(
        code="vm-start", fault="infrastructure", where="any stage",
        means="The VM would not start or resume under libvirt, had no data channel, or libvirt would not bound its "
              "memory.",
        remedy="Read libvirt's message in `vmjudge show ID --organiser` and run `vmjudge doctor`; for the memory "
               "bound, enable its controller (cgroup_controllers in /etc/libvirt/qemu.conf) and restart libvirtd.",
    ),
)
