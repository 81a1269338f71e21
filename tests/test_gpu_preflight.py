"""GPU hosts (#14), on the host only: site.toml's [gpu] table, and the preflight that reads
sysfs before a GPU is lent to a VM, against fake sysfs trees shaped like Linux's (no GPU is
lent to these machines)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vmjudge.config import GpuSite, load_site
from vmjudge.errors import ConfigError

T4 = "0000:65:00.0"


def write_site(home: Path, text: str) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    (home / "site.toml").write_text(text)
    return home


def test_no_gpu_table_means_no_gpu_and_the_t4_allowed(tmp_path):
    gpu = load_site(tmp_path).gpu
    assert gpu == GpuSite()
    assert (gpu.devices, gpu.sysfs, gpu.dev, gpu.ids) == ((), Path("/sys"), Path("/dev"), ("10de:1eb8",))


def test_gpu_table_is_read(tmp_path):
    write_site(tmp_path, '[gpu]\ndevices = ["0000:65:00.0", "0000:b3:1f.7"]\nsysfs = "/tmp/fake/sys"\n'
                         'dev = "/tmp/fake/dev"\nids = ["10de:1eb8", "10de:2236"]\n')
    gpu = load_site(tmp_path).gpu
    assert gpu.devices == ("0000:65:00.0", "0000:b3:1f.7")
    assert (gpu.sysfs, gpu.dev) == (Path("/tmp/fake/sys"), Path("/tmp/fake/dev"))
    assert gpu.ids == ("10de:1eb8", "10de:2236")


ADDRESSES = "PCI addresses as `lspci -D` prints them, in lowercase, such as \"0000:65:00.0\""


@pytest.mark.parametrize("text, says", [
    ('devices = ["65:00.0"]', f"[gpu] devices has '65:00.0', which is not allowed: use {ADDRESSES}."),
    ('devices = ["0000:65:00.0A"]', f"[gpu] devices has '0000:65:00.0A', which is not allowed: use {ADDRESSES}."),
    ('devices = ["0000:65:00.8"]', f"[gpu] devices has '0000:65:00.8', which is not allowed: use {ADDRESSES}."),
    ('devices = ["0000:65:20.0"]', f"[gpu] devices has '0000:65:20.0', which is not allowed: use {ADDRESSES}."),
    ('devices = ["0000:B3:00.0"]', f"[gpu] devices has '0000:B3:00.0', which is not allowed: use {ADDRESSES}."),
    ('devices = [650000]', f"[gpu] devices has 650000, which is not allowed: use {ADDRESSES}."),
    ('devices = "0000:65:00.0"', f"[gpu] devices = '0000:65:00.0' is not allowed: use {ADDRESSES}."),
    ('devices = ["0000:65:00.0", "0000:66:00.0", "0000:65:00.0"]',
     "[gpu] devices names '0000:65:00.0' more than once, which is not allowed: name each GPU once (each is one "
     "slot)."),
    ('ids = ["10DE:1EB8"]', "[gpu] ids has '10DE:1EB8', which is not allowed: use vendor:device ids in lowercase "
                            "hex, such as \"10de:1eb8\" (a T4)."),
    ('ids = ["10de"]', "[gpu] ids has '10de', which is not allowed: use vendor:device ids in lowercase hex, such as "
                       "\"10de:1eb8\" (a T4)."),
    ('ids = []', "[gpu] ids = [] is not allowed: name at least one vendor:device id, such as \"10de:1eb8\" (a T4), "
                 "or leave the key out for that."),
    ('ids = ["10de:1eb8", "10de:1eb8"]', "[gpu] ids names '10de:1eb8' more than once, which is not allowed: name "
                                         "each id once."),
    ('sysfs = "sys"', "[gpu] sysfs = 'sys' is not allowed: use an absolute path, such as \"/sys\" (tests point it "
                      "at a fake tree)."),
    ('dev = 1', "[gpu] dev = 1 is not allowed: use an absolute path, such as \"/dev\" (tests point it at a fake "
                "tree)."),
    ('device = ["0000:65:00.0"]', "[gpu] has unknown key(s) device: remove or correct them."),
])
def test_bad_gpu_values_are_refused_with_what_is_allowed(tmp_path, text, says):
    write_site(tmp_path, f"[gpu]\n{text}\n")
    with pytest.raises(ConfigError) as err:
        load_site(tmp_path)
    assert str(err.value) == f"{tmp_path / 'site.toml'}: {says}"
