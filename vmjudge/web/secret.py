"""The key that signs the portal's session cookies: made once, kept 0600 in the home, so that a
restarted `vmjudge web` (or a second one on the same home) keeps everyone signed in."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from .. import private
from ..errors import VmjudgeError

KEY_FILE = "web-session.key"


def session_key(home: Path) -> str:
    """The home's session-signing key, made (readable by the judge alone) if there is none."""
    path = Path(home) / KEY_FILE
    if not path.exists():
        # Written whole under another name and linked into place: of two processes starting at
        # once, one link wins and both read the same key, never a half-written one.
        part = path.with_name(f".{KEY_FILE}.{secrets.token_hex(8)}")
        with private.create(part) as f:
            f.write((secrets.token_hex(32) + "\n").encode())
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(part, path)
        except FileExistsError:
            pass
        finally:
            part.unlink()
    try:
        private.restrict(path)
        key = path.read_text().strip()
    except OSError as exc:
        raise VmjudgeError(f"cannot read the portal's session key {path} ({exc.strerror or exc}): "
                           "check the home directory.") from exc
    if len(key) < 32:
        raise VmjudgeError(f"the portal's session key {path} is too short to sign sessions: remove it, and "
                           "`vmjudge web` makes a new one (everyone signs in again).")
    return key
