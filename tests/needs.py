"""A test that cannot run here (not root, a tool missing) skips on a developer's machine, and
fails under CI (CI=true, as .ci/run sets it): CI runs as root with `make setup`'s tools, so a
skip there would be a broken setup passing in silence."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def cannot_run(reason: str) -> NoReturn:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}, which CI must have (CI=true)", pytrace=False)
    pytest.skip(reason)
