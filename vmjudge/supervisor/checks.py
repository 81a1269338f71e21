"""One line of `vmjudge doctor`: what was checked, whether it passed, and what to do if not.

A third state, `warn`, is for what the production profile refuses and a trial profile judges
with all the same (TCG, no AppArmor): shown, never hidden, but no failure of a trial host.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    warn: bool = False  # passed only because the site's profile is "trial" (or allow_no_lsm): said so

    def line(self) -> str:
        mark = "FAIL" if not self.ok else "warn" if self.warn else "ok  "
        return f"{mark}  {self.name:<10} {self.detail}"
