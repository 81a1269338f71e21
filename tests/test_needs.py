"""tests/needs.py: a test that cannot run here skips, except under CI, where it fails."""

from __future__ import annotations

import pytest

from .needs import cannot_run


def test_under_ci_a_missing_tool_fails(monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="busybox is not installed, which CI must have"):
        cannot_run("busybox is not installed")


@pytest.mark.parametrize("ci", [None, "", "false"])
def test_elsewhere_it_skips(monkeypatch, ci):
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.skip.Exception, match="busybox is not installed"):
        cannot_run("busybox is not installed")
