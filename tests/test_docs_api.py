"""docs/reference/api.md and report.md against the code: every JSON API route of the portal is on
the API page and every call the page lists is a route; every field the participant allow-lists
(vmjudge/reports/participant.py) let through is named on the report page. So the reference of what
participants can receive cannot fall behind what they do receive."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from vmjudge.reports import participant

REPO = Path(__file__).resolve().parent.parent
API = (REPO / "docs" / "reference" / "api.md").read_text()
REPORT = (REPO / "docs" / "reference" / "report.md").read_text()
ROUTE_RE = re.compile(r'Route\("(/api/[^"]*)",\s*[\w.]+(?:,\s*methods=\["(\w+)"\])?\)')


def routes() -> set[str]:
    """'METHOD /path' of every /api route, written as the page writes them (ID, NAME)."""
    found = set()
    for path in (REPO / "vmjudge" / "web").glob("*.py"):
        for route, method in ROUTE_RE.findall(path.read_text()):
            found.add(f"{method or 'GET'} {route.replace('{entry_id}', 'ID').replace('{challenge}', 'NAME')}")
    return found


def test_every_api_route_is_on_the_api_page_and_no_other():
    code = routes()
    assert {"POST /api/entries", "GET /api/entries/ID"} <= code  # the pattern still finds them
    documented = set(re.findall(r"^\| `((?:GET|POST|PUT|DELETE) /api/[^`]*)`", API, re.MULTILINE))
    assert code - documented == set(), "routes missing from docs/reference/api.md"
    assert documented - code == set(), "calls on docs/reference/api.md that the portal does not answer"


def fields(shape: Any) -> set[str]:
    """Every field name an allow-list lets through, nested ones included (not a scorer's own)."""
    if isinstance(shape, list):
        return set().union(*(fields(s) for s in shape))
    if isinstance(shape, dict):
        return {k for k in shape if k != participant.ANY}.union(*(fields(v) for v in shape.values()))
    return set()


def test_every_field_a_participant_can_receive_is_named_on_the_report_page():
    lists = [participant.ENTRY, participant.ENTRY_LIST, participant.BOARD_ROW, participant.SUBMITTED,
             participant.PHASES, participant.ERROR]
    allowed = set().union(*(fields(shape) for shape in lists))
    assert {"time_tenths", "archive_sha256", "promoted", "oom_kills"} <= allowed
    missing = sorted(name for name in allowed if f"`{name}`" not in REPORT)
    assert not missing, f"fields participants can receive that docs/reference/report.md does not name: {missing}"
