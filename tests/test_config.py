"""challenge.toml and site.toml: good files load, every bad value is named with what is allowed."""

from __future__ import annotations

import pytest

from vmjudge.config import load_challenge, load_site
from vmjudge.errors import ConfigError


def write(tmp_path, text, name="challenge.toml"):
    (tmp_path / name).write_text(text)
    return tmp_path


def test_full_challenge_loads(tmp_path):
    ch = load_challenge(write(tmp_path, 'name = "beats2014"\n[image]\npackages = ["python3-numpy"]\n'
                                        'pip = ["wfdb==4.3.1"]\n[vm]\nvcpus = 2\nmemory = 2048\nhome = 1024\n'))
    assert ch.name == "beats2014"
    assert ch.image.packages == ("python3-numpy",) and ch.image.pip == ("wfdb==4.3.1",)
    assert (ch.vm.vcpus, ch.vm.memory_mib, ch.vm.home_mib) == (2, 2048, 1024)


def test_vm_defaults_are_the_original_sandbox(tmp_path):
    ch = load_challenge(write(tmp_path, 'name = "x"\n'))
    assert (ch.vm.vcpus, ch.vm.memory_mib, ch.vm.home_mib) == (2, 2048, 1024)


@pytest.mark.parametrize("text, words", [
    ('name = "x"\n[vm]\nvcpus = 0\n', ["[vm] vcpus = 0", "1 to 64"]),
    ('name = "x"\n[vm]\nmemory = "lots"\n', ["[vm] memory = 'lots'", "MiB"]),
    ('name = "x"\n[vm]\nvcpus = true\n', ["[vm] vcpus = True"]),
    ('name = "x"\n[vm]\ncpus = 2\n', ["unknown key(s) cpus"]),
    ('name = "x"\n[image]\npackages = ["Bad Name"]\n', ["[image] packages", "'Bad Name'", "Debian package"]),
    ('name = "x"\n[image]\npip = ["x; rm -rf /"]\n', ["[image] pip"]),
    ('name = "has space"\n', ["name = 'has space'"]),
    ('[vm]\nvcpus = 1\n', ["has no name"]),
    ('name = "x"\n[vm\n', ["not valid TOML"]),
])
def test_bad_values_are_named(tmp_path, text, words):
    with pytest.raises(ConfigError) as err:
        load_challenge(write(tmp_path, text))
    for w in words:
        assert w in str(err.value)
    assert str(tmp_path / "challenge.toml") in str(err.value)


def test_missing_challenge_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_challenge(tmp_path)


def test_site_settings_and_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("VMJUDGE_ACCEL", raising=False)
    monkeypatch.delenv("VMJUDGE_URI", raising=False)
    write(tmp_path, '[libvirt]\nuri = "qemu+ssh://judge1/system"\naccel = "tcg"\nchannel = "uart"\n', "site.toml")
    site = load_site(tmp_path)
    assert (site.uri, site.accel, site.channel) == ("qemu+ssh://judge1/system", "tcg", "uart")
    monkeypatch.setenv("VMJUDGE_ACCEL", "kvm")
    assert load_site(tmp_path).accel == "kvm"
    monkeypatch.setenv("VMJUDGE_ACCEL", "fast")
    with pytest.raises(ConfigError, match="VMJUDGE_ACCEL='fast'"):
        load_site(tmp_path)


def test_bad_site_values(tmp_path):
    write(tmp_path, '[libvirt]\naccel = "hvf"\n', "site.toml")
    with pytest.raises(ConfigError, match=r"\[libvirt\] accel = 'hvf' is not allowed: use \"kvm\" or \"tcg\""):
        load_site(tmp_path)
    write(tmp_path, '[network]\nx = 1\n', "site.toml")
    with pytest.raises(ConfigError, match=r"unknown table \[network\]"):
        load_site(tmp_path)
