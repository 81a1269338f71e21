"""Waiting in tests: on a condition, polled under a deadline, never for a guessed time."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(condition: Callable[[], bool], seconds: float, what: str) -> None:
    """Poll `condition` until it holds, or fail saying `what` did not happen within `seconds`."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {seconds} s")
        time.sleep(0.05)


def wait_until(condition, timeout: float, what: str):
    """Poll `condition` until it gives something true, and return that (fail after `timeout`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
