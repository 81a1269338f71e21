"""docs/tutorial.md, "Your first challenge", run as a reader runs it (issue #34): its sh blocks in
order, each by bash, in one new working directory, on a new home in real VMs, and each block's
standard output compared with the text block the page shows after it (normalised only as the page
says: tutorial_page.normalise). A page that lies about a command or its output fails here.

The home is made under the test site's home, as test_challenge_new_vm.py makes its own, so that libvirt's
qemu user reaches it and `challenge add` finds the session's image (the tutorial's challenge adds no
package). The page's extraction and its checks that need no VM are test_tutorial_page.py's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from vmjudge.vm import domain

from .cli import VM_TIMEOUT
from .tutorial_page import PAGE, command_dir, difference, steps


def test_the_tutorial_runs_as_the_page_says_in_real_vms(site, image, conn):
    home = Path(tempfile.mkdtemp(prefix="tutorial-", dir=site.home))
    os.chmod(home, 0o711)
    (home / "images").symlink_to(site.layout.images)  # the session's base image: the challenge adds no package
    work = home / "work"
    work.mkdir()
    env = {**os.environ, "VMJUDGE_HOME": str(home),
           "PATH": f"{command_dir(home / 'tools')}{os.pathsep}{os.environ['PATH']}"}
    try:
        page = steps(PAGE.read_text())
        assert any("vmjudge daemon" in step.commands for step in page), page  # a page that judges something
        for step in page:
            done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", step.commands], cwd=work, env=env,
                                  capture_output=True, text=True, timeout=VM_TIMEOUT)
            assert done.returncode == 0, f"{step.commands}\nexited {done.returncode}:\n{done.stdout}\n{done.stderr}"
            said = difference(step, done.stdout, home)
            assert said is None, f"{said}\n(standard error:\n{done.stderr})"
        assert domain.leftover_domains(conn) == []
    finally:
        shutil.rmtree(home)
