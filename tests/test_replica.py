"""The replica ISO: the judge's own image files and training set, nothing of the test set,
bootable by plain qemu, and `vmjudge-replica check` giving the judge's verdicts.

The verdicts are computed for real: the daemon judges the same three archives (good,
quiz-mismatch, dryrun) in libvirt VMs, and the replica, booted with the qemu command line the
participants' guide gives (BIOS boot through the ISO's own ISOLINUX, TCG), checks them from
a FAT drive in one boot, driven over its serial console. UEFI firmware (OVMF) boots the same
ISO through its GRUB, as a CD and as a disk.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shlex
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pycdlib
import pytest

from tests.docs_page import section
from tests.host_lock import linked_home
from tests.published import wait_until_published
from tests.replica_console import Console, json_line
from tests.test_pipeline import archive, vmjudge
from tests.waiting import wait_until
from tests.web_process import running_portal, signed_in_client
from vmjudge import __version__ as vmjudge_version
from vmjudge.config import load_challenge
from vmjudge.images.build import build_image
from vmjudge.images.iso import write_iso
from vmjudge.vm import domain

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "af2017"
CASES = ("good", "quiz-mismatch", "dryrun")
BOOT_TIMEOUT = 300  # seconds from qemu's start to the replica's prompt under TCG (measured: about 6)
OVMF = Path("/usr/share/ovmf/OVMF.fd")  # Debian's ovmf package: UEFI firmware for qemu
CHECK_TIMEOUT = 600


@pytest.fixture(scope="module")
def af2017_image(site):
    return build_image(site, load_challenge(EXAMPLE).image, progress=print)


@pytest.fixture(scope="module")
def judged(site, af2017_image, conn):
    """The daemon's verdicts for the three archives, and the replica ISO built by the CLI."""
    home = linked_home(site.home, "replica-")
    entries = home / "entries"
    entries.mkdir()
    vmjudge(home, "challenge", "add", str(EXAMPLE))
    ids = {}
    for case in CASES:
        path = archive(EXAMPLE / "entries" / case, entries / f"af2017-{case}-entry.tar.gz")
        ids[case] = int(vmjudge(home, "submit", "af2017", str(path), "--owner", case).stdout)
    shutil.copytree(EXAMPLE / "entries" / "dryrun", entries / "my-dryrun")  # a directory, not an archive
    vmjudge(home, "daemon", "--slots", "2", "--until-idle")
    wait_until_published(home)  # the participant's reports are compared below
    yield home, ids
    assert domain.leftover_domains(conn) == []
    shutil.rmtree(home)


@pytest.fixture(scope="module")
def replica_iso(judged):
    home, _ = judged
    proc = vmjudge(home, "replica", "build", "af2017", "-o", str(home / "replica.iso"))
    assert "[3/3] done" in proc.stderr and f"{(home / 'replica.iso').stat().st_size} bytes" in proc.stderr
    return home / "replica.iso"


def iso_files(path: Path) -> dict[str, bytes]:
    iso = pycdlib.PyCdlib()
    iso.open(str(path))
    try:
        out = {}
        for root, _dirs, files in iso.walk(rr_path="/"):
            for name in files:
                rr = f"{root.rstrip('/')}/{name}"
                data = io.BytesIO()
                iso.get_file_from_iso_fp(data, rr_path=rr)
                out[rr] = data.getvalue()
        return out
    finally:
        iso.close()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_replica_holds_the_judges_image_and_never_the_test_set(judged, replica_iso, af2017_image):
    files = iso_files(replica_iso)
    home, ids = judged
    # What the judge's own stage runs recorded they booted (their manifests), for every VM stage.
    manifests = [a["manifest"] for i in ids.values() for a in
                 json.loads(vmjudge(home, "show", str(i), "--json", "--organiser").stdout)["organiser"]["attempts"]
                 if a["stage"] != "score"]
    judge_runs = [m["image_sha256"] for m in manifests]
    assert len(judge_runs) >= 6
    # The version that judged them: `vmjudge --version`'s, the top of CHANGELOG.md's (#59).
    assert {m["vmjudge_version"] for m in manifests} == {vmjudge_version}
    for name in ("root.sqfs", "vmlinuz", "initrd.img"):
        assert sha(files[f"/vmjudge/{name}"]) == af2017_image.manifest["sha256"][name] == \
            sha((af2017_image.directory / name).read_bytes())
        assert {run[name] for run in judge_runs} == {sha(files[f"/vmjudge/{name}"])}
    ch = load_challenge(EXAMPLE)
    training = {f"/vmjudge/challenge/training/{f.name}" for r in ch.training for f in ch.record_files("training", r)}
    assert training <= set(files) and "/vmjudge/challenge/training/REFERENCE.csv" in files
    forbidden = [f for d in ("test", "reference") for f in (EXAMPLE / d).rglob("*") if f.is_file()]
    assert len(forbidden) > 10
    hashes = {sha(f.read_bytes()): f for f in forbidden}
    # training/RECORDS and training/REFERENCE.csv share their names (not their content) with test/ and reference/.
    names = {f.name for f in forbidden} - {f.name for f in (EXAMPLE / "training").iterdir()}
    for path, data in files.items():
        assert sha(data) not in hashes, f"{path} on the replica has the content of {hashes[sha(data)]}"
        assert Path(path).name not in names, f"{path} on the replica is named like a test or reference file"
    assert not [p for p in files if "/test/" in p or "/reference/" in p]


def test_replica_build_is_deterministic_and_bootable_from_cd_and_disk(judged, replica_iso):
    home, _ = judged
    again = home / "again.iso"
    vmjudge(home, "replica", "build", "af2017", "-o", str(again))
    assert sha(again.read_bytes()) == sha(replica_iso.read_bytes())
    again.unlink()
    with open(replica_iso, "rb") as f:
        mbr = f.read(512)
        f.seek(17 * 2048)
        boot_record = f.read(2048)
    # isohybrid: partition 1 (the whole ISO, marked active) for a BIOS, partition 2 (0xEF) for UEFI.
    assert mbr[510:512] == b"\x55\xaa" and mbr[0x1be] == 0x80 and mbr[0x1ce + 4] == 0xEF
    assert boot_record[1:6] == b"CD001" and boot_record[7:30].startswith(b"EL TORITO SPECIFICATION")
    # Written to a stick and shown to a VM as an IDE disk, as the participants' guide says; the entry on an ISO.
    text = section("participants.md", "The replica ISO")
    line = re.search(r"`(qemu-system-x86_64 -m 2048 -drive file=/dev/sdX,[^`]*)`", text.replace("\n  ", " ")).group(1)
    argv = [a.replace("/dev/sdX", str(replica_iso)) for a in shlex.split(line)]
    entry_iso = write_iso(home / "entry.iso", {"alice-entry.tar.gz": home / "entries" / "af2017-good-entry.tar.gz"})
    console = Console(argv + ["-drive", f"file={entry_iso},media=cdrom,readonly=on", "-accel", "tcg",
                              "-display", "none"])
    try:
        console.expect(r"replica CD found on /dev/sda", BOOT_TIMEOUT)
        console.expect(r"replica# ", BOOT_TIMEOUT)
        console.send("vmjudge-replica media; echo @@MEDIA@@ $?")
        console.expect(r"entry\? /media/sr\d/alice-entry.tar.gz", 120)
        assert console.expect(r"@@MEDIA@@ (\d+)", 120).group(1) == "0"
    finally:
        console.close()


def test_the_portal_offers_the_replica_the_organisers_command_builds(judged, replica_iso):
    """#58: [portal] replica = true; the first ask starts the build aside (202, a page saying to come
    back), and the ISO then downloaded is the `vmjudge replica build` one, byte for byte."""
    home, _ = judged
    token = vmjudge(home, "owner", "add", "replica-reader").stdout.strip().split()[-1]
    with running_portal(home, home / "portal.log") as portal:
        assert httpx.get(portal.base + "/challenges/af2017/download/replica", timeout=30).status_code == 401
        client = signed_in_client(portal.base, token)
        first = client.get("/challenges/af2017/download/replica")
        assert first.status_code == 202 and "is being made" in first.text
        def made():
            answer = client.get("/challenges/af2017/download/replica")
            return answer if answer.status_code != 202 else None
        got = wait_until(made, CHECK_TIMEOUT, "the portal's replica to be made")
        assert got.status_code == 200 and got.headers["content-disposition"].endswith('"af2017-replica.iso"')
        assert sha(got.content) == got.headers["x-content-sha256"] == sha(replica_iso.read_bytes())
        assert got.headers["x-content-sha256"] in client.get("/challenges/af2017").text


def test_replica_boots_from_a_usb_stick_on_pc_hardware_and_names_no_network(judged, replica_iso):
    """The hardware of a participant's own computer, as qemu models it: the ISO written to a USB
    stick on an xHCI controller, booted by the firmware from the stick; the entry on a CD in a
    SATA (AHCI) drive, as VirtualBox attaches one; a USB keyboard, which must keep working once
    the kernel's USB drivers take the controller from the firmware; and a network card, for which
    the replica has no driver."""
    home, _ = judged
    entry_iso = write_iso(home / "entry-sata.iso",
                          {"alice-entry.tar.gz": home / "entries" / "af2017-good-entry.tar.gz"})
    console = Console(["qemu-system-x86_64", "-m", "2048", "-accel", "tcg", "-display", "none", "-serial", "stdio",
                       "-nic", "user,model=e1000",
                       "-device", "qemu-xhci,id=xhci",
                       "-drive", f"if=none,id=stick,file={replica_iso},format=raw,readonly=on",
                       "-device", "usb-storage,bus=xhci.0,drive=stick,bootindex=1",
                       "-device", "usb-kbd,bus=xhci.0",
                       "-device", "ahci,id=sata",
                       "-drive", f"if=none,id=entrycd,file={entry_iso},media=cdrom,readonly=on",
                       "-device", "ide-cd,bus=sata.0,drive=entrycd"])
    try:
        stick = console.expect(r"replica CD found on /dev/(sd[a-z])", BOOT_TIMEOUT).group(1)
        console.expect(r"replica# ", BOOT_TIMEOUT)
        # The markers are typed with quotes in them, so only the output matches them.
        console.send(f"echo '@@HW''-START@@'; readlink -f /sys/block/{stick} /sys/block/sr0; ls /sys/class/net; "
                     "echo '@@HW''-END@@'; cat /sys/class/input/input*/name; echo '@@KBD''-END@@'")
        seen = console.expect(r"(?s)@@HW-START@@\r?\n(.*?)@@HW-END@@", 60).group(1).split()
        assert re.match(r"/sys/devices/pci0000:00/[^ ]*/usb\d/.*/block/sd[a-z]$", seen[0]), seen
        assert "/ata" in seen[1] and seen[1].endswith("/block/sr0"), seen
        assert seen[2:] == ["lo"], seen  # the e1000 card is there, and has no driver
        assert "QEMU QEMU USB Keyboard" in console.expect(r"(?s)(.*?)@@KBD-END@@", 60).group(1)
        console.send("vmjudge-replica media; echo @@MEDIA@@ $?")
        console.expect(r"entry\? /media/sr0/alice-entry.tar.gz", 120)
        assert console.expect(r"@@MEDIA@@ (\d+)", 120).group(1) == "0"
        assert f"/media/{stick}" not in console.text()  # the stick's own partitions are not offered as media
    finally:
        console.close()


def efi_partition(iso: Path) -> bytes:
    """What a UEFI firmware finds as the EFI system partition of the ISO written to a disk."""
    with open(iso, "rb") as f:
        mbr = f.read(512)
        start, count = struct.unpack_from("<LL", mbr, 0x1ce + 8)
        f.seek(start * 512)
        return f.read(count * 512)


def test_replica_boots_with_uefi_from_cd_and_disk(judged, replica_iso, tmp_path):
    """OVMF boots the ISO as a CD (El Torito EFI entry) and as an IDE disk and a USB stick (the
    MBR's EFI system partition), GRUB boots the same kernel, initramfs and command line as ISOLINUX, and the
    replica works; the kernel itself says it was started by UEFI firmware."""
    home, _ = judged
    esp = efi_partition(replica_iso)
    assert esp == iso_files(replica_iso)["/efi/efiboot.img"]
    (tmp_path / "esp.img").write_bytes(esp)
    listing = subprocess.run(["mdir", "-b", "-i", str(tmp_path / "esp.img"), "::/EFI/BOOT"],
                             capture_output=True, text=True, check=True, env=dict(os.environ, MTOOLS_SKIP_CHECK="1"),
                             timeout=300)
    assert listing.stdout.split() == ["::/EFI/BOOT/BOOTX64.EFI"]
    isolinux = iso_files(replica_iso)["/isolinux/isolinux.cfg"].decode()
    append = [w for w in re.search(r"APPEND (.*)", isolinux).group(1).split() if not w.startswith("initrd=")]
    text = section("participants.md", "The replica ISO")
    assert f"-bios {OVMF}" in text
    cd = [str(replica_iso) if a == "replica.iso" else a for a in guide_qemu_command()]
    cd = cd[:cd.index("-drive")] + cd[cd.index("-drive") + 2:]  # no entries directory needed here
    disk = ["qemu-system-x86_64", "-m", "2048", "-drive", f"file={replica_iso},format=raw,if=ide,snapshot=on",
            "-nic", "none", "-serial", "stdio"]
    stick = ["qemu-system-x86_64", "-m", "2048", "-device", "qemu-xhci,id=xhci",
             "-drive", f"if=none,id=stick,file={replica_iso},format=raw,readonly=on",
             "-device", "usb-storage,bus=xhci.0,drive=stick,bootindex=1", "-nic", "none", "-serial", "stdio"]
    for how, argv, device in (("cd", cd, r"/dev/sr0"), ("disk", disk, r"/dev/sda"), ("usb stick", stick, r"/dev/sda")):
        console = Console(argv + ["-bios", str(OVMF), "-accel", "tcg", "-display", "none"])
        try:
            started = time.monotonic()
            console.expect(rf"replica CD found on {device}", BOOT_TIMEOUT)
            console.expect(r"replica# ", BOOT_TIMEOUT)
            print(f"UEFI boot from {how} to prompt: {time.monotonic() - started:.1f} s")
            # The echoed command line shows "$(" where the answers will be, which the patterns skip; each
            # pattern ends at the line's end, so that it never matches a line still arriving.
            console.send("echo @@FIRMWARE@@ $(test -d /sys/firmware/efi && echo uefi || echo bios);"
                         " echo @@CMDLINE@@ $(cat /proc/cmdline); vmjudge-replica media; echo @@MEDIA@@ $?")
            assert console.expect(r"@@FIRMWARE@@ (\w+)\r?\n", 60).group(1) == "uefi", how
            cmdline = console.expect(r"@@CMDLINE@@ ([^$\r\n][^\r\n]*)\r?\n", 60).group(1).split()
            assert [w for w in cmdline if not w.startswith("BOOT_IMAGE=")] == append, how
            assert console.expect(r"@@MEDIA@@ (\d+)", 120).group(1) == "0"
        finally:
            console.close()


def test_guest_side_imports_need_no_host_library():
    """vmjudge-replica runs on the guest root's Python: no click, libvirt, pyserial or pycdlib."""
    code = ("import sys\n"
            "class Block:\n"
            "    def find_spec(self, name, path, target=None):\n"
            "        if name.split('.')[0] in ('libvirt', 'serial', 'pycdlib', 'click', 'wfdb'):\n"
            "            raise ImportError('blocked ' + name)\n"
            "sys.meta_path.insert(0, Block())\n"
            "import vmjudge.cli.replica_check, vmjudge.replica.check, vmjudge.replica.local, "
            "vmjudge.supervisor.attempts, vmjudge.scorers.builtin.af2017\n"
            "print('imported')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.stdout.strip() == "imported", proc.stderr


def guide_qemu_command() -> list[str]:
    """The qemu line participants are told to run, from the participants' guide's "The replica ISO"."""
    line = next(ln.strip() for ln in section("participants.md", "The replica ISO").splitlines()
                if ln.strip().startswith("qemu-system-x86_64 -m 2048 -cpu max -cdrom"))
    return shlex.split(line)


def test_the_guides_document_the_build_command():
    """Organisers are told how to build the ISO; participants how to boot it, with no network and no -kernel."""
    assert "vmjudge [--home DIR] replica build CHALLENGE_NAME -o replica.iso" in section("organisers.md",
                                                                                     "The daily commands")
    argv = guide_qemu_command()
    assert "-nic" in argv and argv[argv.index("-nic") + 1] == "none" and "-kernel" not in argv


def daemon_stage_messages(home: Path, entry_id: int) -> dict[str, str]:
    doc = json.loads(vmjudge(home, "show", str(entry_id), "--json", "--organiser").stdout)
    return {a["stage"]: a["message"] for a in doc["organiser"]["attempts"] if a["status"] != "infra"}


def without_figures(report: str) -> str:
    return "".join(line for line in report.splitlines(keepends=True)
                   if not line.startswith(("Resources", "Slowest records: ")))


def test_replica_check_gives_the_daemons_verdicts(judged, replica_iso, af2017_image):
    home, ids = judged
    argv = guide_qemu_command()
    # Participants' own names in the guide: the ISO and their entries directory.
    argv = [str(replica_iso) if a == "replica.iso" else a.replace("fat:ro:entries", f"fat:ro:{home / 'entries'}")
            for a in argv]
    assert f"file=fat:ro:{home / 'entries'},format=raw,if=virtio,readonly=on" in argv
    console = Console(argv + ["-accel", "tcg", "-display", "none"])
    try:
        started = time.monotonic()
        console.expect(r"replica# ", BOOT_TIMEOUT)
        print(f"replica boot to prompt: {time.monotonic() - started:.1f} s")
        console.send("vmjudge-replica media; echo @@MEDIA@@ $?")
        assert console.expect(r"@@MEDIA@@ (\d+)", 120).group(1) == "0"
        # What the participant compares with the judge's manifest: the files it booted, hashed there.
        console.send("vmjudge-replica info > /tmp/info.json; s=$?; tr -d '\\n' < /tmp/info.json; echo; "
                     "echo @@INFO@@ $s")
        body = console.expect(r"\n(\{[^\n]*\})\r?\n@@INFO@@ (\d+)", 300)
        info = json.loads(body.group(1))
        assert body.group(2) == "0"
        assert (info["challenge"], info["image"]) == ("af2017", af2017_image.key)
        # The judge's level (the test site's TCG "max": x86-64-v3 on qemu 7.2), and the guide's `-cpu max` gives
        # the replica the same, so its check has no CPU warning (#41; cpu_match.py's warnings: test_replica_cpu.py).
        assert (info["cpu"]["setting"], info["cpu"]["level"]) == ("max", "x86-64-v3")
        assert info["sha256"] == info["manifest_sha256"] == {
            name: hashlib.sha256((af2017_image.directory / name).read_bytes()).hexdigest()
            for name in ("root.sqfs", "vmlinuz", "initrd.img")}
        for case in CASES:
            output, status = console.run(f"vmjudge-replica check --json /media/vda1/af2017-{case}-entry.tar.gz",
                                         CHECK_TIMEOUT)
            replica = json_line(output)
            judge = json.loads(vmjudge(home, "show", str(ids[case]), "--json").stdout)
            messages = daemon_stage_messages(home, ids[case])
            assert replica["stages"]["prep"] == messages["prep"], case
            assert replica["cpu_warning"] is None, replica["cpu_warning"]
            if case == "good":
                assert judge["outcome"] == "scored" and replica["outcome"] == "passed" and status == 0
                assert replica["stages"]["quiz"] == messages["quiz"]
                assert replica["training_scores"]["score"] == pytest.approx(1.0)
                assert "would now go on to stage 3" in replica["report"]
            else:
                assert (replica["outcome"], replica["failed_stage"], replica["reason"]) == \
                    (judge["outcome"], judge["failed_stage"], judge["reason"]), case
                assert replica["stages"] == messages
                assert status == (0 if case == "dryrun" else 1)
                # The participant's report: every stage paragraph and the verdict line, word for word,
                # but for what each run used, measured on the participant's machine (#20).
                assert "\nResources: setup.sh " in replica["report"]
                assert without_figures(replica["report"]).split("\n", 1)[1] == \
                    without_figures(judge["report"]).split("\n", 1)[1]
        # A directory on the FAT drive is packed into the archive the judge would receive.
        output, status = console.run("vmjudge-replica check --json /media/vda1/my-dryrun", CHECK_TIMEOUT)
        replica = json_line(output)
        assert replica["archive"] == "my-dryrun-entry.tar.gz" and status == 0
        assert replica["stages"] == daemon_stage_messages(home, ids["dryrun"])
        key = {"quiz-mismatch": "output does not match submission", "dryrun": "Dry run completed with no error"}
        for case, words in key.items():
            assert words in json.loads(vmjudge(home, "show", str(ids[case]), "--json").stdout)["report"]
        # A replica that cannot run the judge's agent says so, with exit status 2 (not an entry's failure).
        output, status = console.run("mv /opt/vmjudge/agent.py /opt/vmjudge/agent.off; vmjudge-replica check "
                                     "/media/vda1/af2017-good-entry.tar.gz", CHECK_TIMEOUT)
        said = output.strip().splitlines()[-1]
        assert status == 2, said
        assert said.startswith("vmjudge-replica: the replica could not finish the check ("), said
    finally:
        console.close()
    assert console.proc.returncode is not None


def test_boot_files_keep_plain_iso9660_names_and_the_output_is_reproducible(tmp_path):
    """ISOLINUX looks files up by their ISO 9660 names; pycdlib's random MBR id is pinned."""
    from vmjudge.images.iso import ElTorito, write_iso
    from vmjudge.replica.build import ISOLINUX_BIN, LDLINUX_C32

    files = {"isolinux/isolinux.bin": ISOLINUX_BIN, "isolinux/ldlinux.c32": LDLINUX_C32,
             "isolinux/isolinux.cfg": b"DEFAULT x\n", "vmjudge/vmlinuz": b"kernel", "vmjudge/root.sqfs": b"root"}
    boot = ElTorito(loader="isolinux/isolinux.bin", catalog="isolinux/boot.cat",
                    plain=frozenset({"isolinux/ldlinux.c32", "isolinux/isolinux.cfg", "vmjudge/vmlinuz"}))
    one, two = write_iso(tmp_path / "one.iso", files, boot=boot), write_iso(tmp_path / "two.iso", files, boot=boot)
    assert one.read_bytes() == two.read_bytes()
    iso = pycdlib.PyCdlib()
    iso.open(str(one))
    try:
        for plain in ("/ISOLINUX/ISOLINUX.BIN;1", "/ISOLINUX/LDLINUX.C32;1", "/ISOLINUX/ISOLINUX.CFG;1",
                      "/VMJUDGE/VMLINUZ.;1"):
            iso.get_record(iso_path=plain)
        data = io.BytesIO()
        iso.get_file_from_iso_fp(data, rr_path="/vmjudge/root.sqfs")
        assert data.getvalue() == b"root"
    finally:
        iso.close()


def test_uefi_boot_image_is_pinned_and_is_both_the_el_torito_entry_and_the_efi_partition(tmp_path, monkeypatch):
    """Nothing in the UEFI boot image carries the build's date; the ISO's El Torito EFI entry
    and its MBR partition 2 (type 0xEF) are that image; the GPT's GUIDs are fixed and agree."""
    from vmjudge.errors import MediaError
    from vmjudge.images.iso import GPT_DISK_GUID, ElTorito, write_iso
    from vmjudge.replica import efi
    from vmjudge.replica.build import ISOLINUX_BIN

    image = efi.build_efi_image(tmp_path)
    env = dict(os.environ, MTOOLS_SKIP_CHECK="1")
    listing = subprocess.run(["mdir", "-i", str(image), "-/", "::/"], capture_output=True, text=True, check=True,
                             env=env, timeout=300).stdout
    dates = re.findall(r"\d{4}-\d\d-\d\d +\d+:\d\d", listing)
    assert "BOOTX64  EFI" in listing and len(dates) == 7 and set(dates) == {"2000-01-01   0:00"}, listing
    grub = (tmp_path / "BOOTX64.EFI").read_bytes()
    pe = struct.unpack_from("<I", grub, 0x3c)[0]
    # grub-mkimage's PE header date is its fixed 2015-01-01, not the build's.
    assert grub[pe:pe + 4] == b"PE\0\0" and struct.unpack_from("<I", grub, pe + 8)[0] == 1420070400
    files = {"isolinux/isolinux.bin": ISOLINUX_BIN, "efi/efiboot.img": image, "vmjudge/replica.json": b"{}"}
    boot = ElTorito(loader="isolinux/isolinux.bin", catalog="isolinux/boot.cat", efi="efi/efiboot.img")
    one, two = write_iso(tmp_path / "one.iso", files, boot=boot), write_iso(tmp_path / "two.iso", files, boot=boot)
    data = one.read_bytes()
    assert data == two.read_bytes()
    assert data[0x1ce + 4] == 0xEF and efi_partition(one) == image.read_bytes()
    iso = pycdlib.PyCdlib()
    iso.open(str(one))
    try:
        sections = iso.eltorito_boot_catalog.sections
        assert [s.platform_id for s in sections] == [0xEF]
        assert sections[0].section_entries[0].load_rba * 2048 == data.index(image.read_bytes())
    finally:
        iso.close()
    primary, backup = data[512:1024], data[-512:]
    assert primary[:8] == backup[:8] == b"EFI PART"
    assert primary[56:72] == backup[56:72] == GPT_DISK_GUID.bytes
    monkeypatch.setattr(efi, "TOOLS", {"mkfs.nothing": "dosfstools"})
    with pytest.raises(MediaError, match=r"^mkfs.nothing is missing, .*`apt-get install dosfstools`\.$"):
        efi.build_efi_image(tmp_path)
    monkeypatch.setattr(efi, "GRUB_EFI_MODULES", tmp_path / "no-grub")
    with pytest.raises(MediaError, match=r"apt-get install grub-efi-amd64-bin`\.$"):
        efi.build_efi_image(tmp_path)
