"""`vmjudge-replica`, inside the booted replica: check an entry, list the attached drives'
entries, describe the replica. argparse, not click: the replica's Python has the standard
library only."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from ..errors import InfrastructureError, VmjudgeError
from ..replica.check import check, info, media, print_report, say


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vmjudge-replica", description="The judge's stages 1 and 2, here.")
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="run stages 1 and 2 on ENTRY (an archive or a directory)")
    c.add_argument("entry", type=Path)
    c.add_argument("--json", action="store_true", help="print the result as JSON")
    c.add_argument("--no-score", action="store_true", help="do not score the training answers")
    sub.add_parser("media", help="mount attached drives read-only under /media and list entries on them")
    sub.add_parser("info", help="the challenge, the image, the sha256 of each image file and what the "
                               "challenge's build step installed")
    args = parser.parse_args(argv)
    try:
        if args.command == "check":
            if os.geteuid() != 0:
                raise VmjudgeError("the check runs the judge's agent, which needs root: run it as root.")
            result = check(args.entry, score=not args.no_score)
            if args.json:
                print(json.dumps(result, sort_keys=True))
            else:
                print_report(result)
            return 0 if result["outcome"] in ("passed", "dry-run") else 1
        if args.command == "media":
            found = media()
            say("\n".join(f"entry? {p}" for p in found) if found else "no entry found on the attached drives")
            return 0
        print(json.dumps(info(), indent=1, sort_keys=True))
        return 0
    except InfrastructureError as exc:
        say(f"vmjudge-replica: the replica could not finish the check ({exc.reason}): {exc}", file=sys.stderr)
        return 2
    except VmjudgeError as exc:
        say(f"vmjudge-replica: {exc}", file=sys.stderr)
        return 1
