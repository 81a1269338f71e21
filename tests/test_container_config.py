"""challenge.toml's [entry] kind and [container] (#39): the container kind's defaults, and every
bad value refused with the file, the key and what is allowed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from vmjudge.config import ContainerRules, load_challenge
from vmjudge.errors import ConfigError
from vmjudge.replica.tools import TOOLS, tool_files


def write(tmp_path, text):
    (tmp_path / "challenge.toml").write_text('name = "x"\n' + text)
    return tmp_path


def test_archive_is_the_default_kind_and_keeps_its_limits(tmp_path):
    ch = load_challenge(write(tmp_path, ""))
    assert ch.entry.kind == "archive" and ch.container is None
    assert (ch.entry.max_size, ch.entry.max_unpacked, ch.entry.required) == (50 << 20, 1 << 30, ("setup.sh", "next.sh"))


def test_container_kind_has_its_own_defaults(tmp_path):
    ch = load_challenge(write(tmp_path, '[entry]\nkind = "container"\n'))
    assert ch.entry.kind == "container"
    assert (ch.entry.max_size, ch.entry.max_unpacked, ch.entry.max_members) == (2 << 30, 8 << 30, 500_000)
    assert ch.entry.required == ()
    assert ch.container == ContainerRules(input="/input", output="/output", command=None, run="per_case")


def test_container_keys_are_read(tmp_path):
    ch = load_challenge(write(tmp_path, '[entry]\nkind = "container"\nmax_size = 1000000\n'
                                        '[container]\ninput = "/data/in"\noutput = "/data/out"\n'
                                        'command = ["/app/run", "--fast", ""]\nrun = "whole_set"\n'))
    assert ch.entry.max_size == 1000000
    assert ch.container == ContainerRules("/data/in", "/data/out", ("/app/run", "--fast", ""), "whole_set")


def test_a_container_challenge_leaves_a_file_per_record_and_submits_them_in_its_image(tmp_path):
    ch = load_challenge(write(tmp_path, '[entry]\nkind = "container"\n'))
    assert (ch.results.style, ch.results.pattern, ch.results.submitted) == \
        ("files", "{record}.txt", "/submitted/{record}.txt")
    # On the host the file is kept under the entry's directory: never joined as an absolute path.
    assert ch.results.submitted_path("r1") == "/submitted/r1.txt" and ch.results.stored_path("r1") == "submitted/r1.txt"


def test_the_replica_of_a_container_challenge_carries_the_judges_own_tools():
    """The tools stage 1 makes a root with, and every library they load (with the loader), as this
    host has them: the replica runs the judge's very binaries (tests/test_container_pipeline.py
    boots one)."""
    files = tool_files()
    for tool in TOOLS:
        assert files[f"vmjudge/tools/bin/{tool}"] == Path(shutil.which(tool)).resolve()
    libraries = {name.rsplit("/", 1)[1]: path for name, path in files.items() if "/lib/" in name}
    assert {"ld-linux-x86-64.so.2", "libc.so.6"} <= set(libraries)
    for name, path in libraries.items():
        assert path.is_file() and not path.is_symlink(), name
    listed = subprocess.run(["ldd", shutil.which("mksquashfs")], capture_output=True, text=True, check=True).stdout
    assert {line.split()[0] for line in listed.splitlines() if "=>" in line} <= set(libraries)


@pytest.mark.parametrize("text, words", [
    ('[entry]\nkind = "docker"\n', ['[entry] kind = \'docker\'', '"archive" or "container"']),
    ('[entry]\nkind = "container"\nrequired = ["run.sh"]\n', ["[entry] required is for archive entries"]),
    ('[container]\ninput = "/in"\n', ['[container] is for container entries only', 'kind = "container"']),
    ('[entry]\nkind = "container"\n[container]\ninput = "in"\n', ["[container] input = 'in'", "an absolute path"]),
    ('[entry]\nkind = "container"\n[container]\ninput = "/"\n', ["[container] input = '/'", 'not "/"']),
    ('[entry]\nkind = "container"\n[container]\noutput = "/proc/x"\n', ["[container] output = '/proc/x'",
                                                                         "not under /proc, /sys, /dev"]),
    ('[entry]\nkind = "container"\n[container]\noutput = "/sys"\n', ["[container] output = '/sys'"]),
    ('[entry]\nkind = "container"\n[container]\ninput = "/dev/shm/in"\n', ["[container] input = '/dev/shm/in'"]),
    ('[entry]\nkind = "container"\n[container]\ninput = "/a/../proc"\n', ["[container] input = '/a/../proc'"]),
    ('[entry]\nkind = "container"\n[container]\ninput = "/a//b"\n', ["[container] input = '/a//b'"]),
    ('[entry]\nkind = "container"\n[container]\ninput = "/in/"\n', ["[container] input = '/in/'"]),
    ('[entry]\nkind = "container"\n[container]\ninput = "/in"\noutput = "/in/out"\n',
     ["input = '/in' and output = '/in/out' overlap"]),
    ('[entry]\nkind = "container"\n[container]\ninput = "/io"\noutput = "/io"\n', ["overlap"]),
    ('[entry]\nkind = "container"\n[container]\ncommand = "/app/run"\n', ["[container] command = '/app/run'",
                                                                         "a list of 1 to 256 strings"]),
    ('[entry]\nkind = "container"\n[container]\ncommand = []\n', ["[container] command = []"]),
    ('[entry]\nkind = "container"\n[container]\ncommand = ["", "x"]\n', ["the first not empty"]),
    ('[entry]\nkind = "container"\n[container]\ncommand = ["/a", 1]\n', ["[container] command = ['/a', 1]"]),
    ('[entry]\nkind = "container"\n[container]\nrun = "once"\n', ["[container] run = 'once'",
                                                                  '"per_case" or "whole_set"']),
    ('[entry]\nkind = "container"\n[container]\nimage = "x"\n', ["[container] has unknown key(s) image"]),
    ('[entry]\nkind = "container"\n[results]\nstyle = "answer-lines"\n', ['style = "answer-lines" is for archive',
                                                                         'set style = "files"']),
    ('[entry]\nkind = "container"\n[results]\nsubmitted = "submitted/{record}.txt"\n',
     ["[results] submitted = 'submitted/{record}.txt'", "an absolute path in the image"]),
    ('[entry]\nkind = "container"\n[results]\nsubmitted = "/s/../../{record}"\n', ["an absolute path in the image"]),
    ('[entry]\nkind = "container"\n[results]\nsubmitted = "/proc/{record}"\n', ["not under /proc, /sys or /dev"]),
    ('[entry]\nkind = "container"\n[results]\nsubmitted = "/s/answers.txt"\n', ["holding {record}"]),
])
def test_bad_container_values_are_named(tmp_path, text, words):
    with pytest.raises(ConfigError) as err:
        load_challenge(write(tmp_path, text))
    message = str(err.value)
    assert str(tmp_path / "challenge.toml") in message
    for w in words:
        assert w in message
