"""What an entry runs on, written by the judge (#58): from the image's manifest and the challenge's VM, the
same words for `vmjudge challenge show` and the challenge page; the check against a real guest is
tests/test_sandbox_vm.py's."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from vmjudge.config import Site, VmShape, load_challenge, load_site
from vmjudge.images.build import image_key
from vmjudge.images.image import FILES
from vmjudge.images.runtime import describe_runtime, upstream
from vmjudge.queue.db import Queue

from .cli import run_cli

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
MANIFEST = {"suite": "bookworm", "debian_version": "12.12", "kernel_version": "6.1.0-57-amd64",
            "packages": {"python3": "3.11.2-1+b1", "python3-pandas": "1.5.3+dfsg-2", "bash": "5.2.15-2+b13"},
            "pip_packages": [], "key": "k" * 20}


def test_the_runtime_names_the_system_the_challenges_packages_the_vm_and_the_limits():
    ch = load_challenge(EXAMPLES / "drivendata-style")
    runtime = describe_runtime(ch, MANIFEST, Site(home=Path("/nonexistent"), accel="tcg"))
    lines = runtime.lines()
    assert lines[0] == "System: Debian 12.12 (bookworm), Linux 6.1.0-57-amd64, Python 3.11.2"
    assert lines[1] == "Packages: python3-pandas 1.5.3+dfsg-2"  # the challenge's own, not the base system's
    assert lines[2] == ("VM: 1 vCPU, 1024 MiB of memory (the entry's commands may use about 896 MiB together), a 256 "
                        "MiB home disk")
    assert lines[3] == "CPU: every feature this host's qemu emulates (no hardware acceleration)"
    assert lines[4] == "GPU: none" and lines[5].startswith("Network: none. The VM has no network interface: the "
                                                          "entry runs offline")
    assert lines[6] == "Time limits: installing the submission 60 s; the quiz 45 s; the exam 120 s"
    archive = describe_runtime(replace(load_challenge(EXAMPLES / "af2017"), vm=VmShape(vcpus=2, memory_mib=4096)),
                               MANIFEST, Site(home=Path("/nonexistent"), accel="kvm"))
    assert "setup.sh and next.sh run offline" in archive.lines()[5] and archive.entry_memory_mib == 4096 - 409
    assert archive.cpu == "the host's own CPU, passed through" and "2 vCPUs" in archive.lines()[2]
    assert archive.lines()[6].startswith("Time limits: setup.sh ") and "; each record 40 s;" in archive.lines()[6]
    stepped = describe_runtime(load_challenge(EXAMPLES / "drivendata-stepped"), MANIFEST, Site(home=Path("/x")))
    assert "; each step 10 s;" in stepped.lines()[6]
    assert (upstream("1:3.11.2-1"), upstream("2.38.1-5+deb12u3"), upstream(None)) == ("3.11.2", "2.38.1", None)


def test_challenge_show_says_it_from_the_built_image_or_how_to_build_it(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "site.toml").write_text("")
    site = load_site(home)
    ch = load_challenge(EXAMPLES / "drivendata-stepped")
    Queue(site.layout.queue_db).add_challenge(ch.name, ch.directory, "key")
    missing = run_cli("challenge", "show", ch.name, home=home)
    assert missing.returncode == 1 and "vmjudge image build" in missing.stderr and "Traceback" not in missing.stderr
    image = site.layout.images / image_key(site, ch.image)
    image.mkdir(parents=True)
    (image / "manifest.json").write_text(json.dumps({**MANIFEST, "key": image.name}))
    for name in FILES:
        (image / name).write_bytes(b"")
    shown = run_cli("challenge", "show", ch.name, home=home)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[:2] == [f"drivendata-stepped: what its entries run on (image {image.name})",
                                             "  System: Debian 12.12 (bookworm), Linux 6.1.0-57-amd64, Python 3.11.2"]
    doc = json.loads(run_cli("challenge", "show", ch.name, "--json", home=home).stdout)
    assert doc["runtime"]["python"] == "3.11.2" and doc["runtime"]["limits"]["each step"] == 10
