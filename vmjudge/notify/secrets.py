"""Secret files (SMTP credentials, the webhooks' signing key): read only when no one but the
daemon's user can read them. A secret another local user can read is one that user can send
mail with or forge the judge's signatures with; refusing it at once tells the organiser, where
reading it anyway would tell no one."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..errors import ConfigError


def read_private(path: Path, what: str) -> str:
    """The text of `path`, refused in one sentence unless it is a regular file owned by this
    process's user with no permission for group or others."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(f"{what} {path} cannot be read ({exc.strerror}): create it, readable by this user "
                          f"only (chmod 600 {path}).") from None
    with os.fdopen(fd, encoding="utf-8") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise ConfigError(f"{what} {path} is not allowed: it must be a file of this user's "
                              f"(uid {os.geteuid()}) that no one else may read or write; run "
                              f"`chown {os.geteuid()} {path} && chmod 600 {path}`.")
        return f.read(65536)


def credentials(path: Path) -> tuple[str, str]:
    """The SMTP user (first line) and password (second line) of a credentials file."""
    lines = read_private(path, "The SMTP credentials file").splitlines()
    if len(lines) < 2 or not lines[0].strip():
        raise ConfigError(f"The SMTP credentials file {path} is not allowed: write the user on its first line and "
                          "the password on its second.")
    return lines[0].strip(), lines[1]


def webhook_secret(path: Path) -> bytes:
    secret = read_private(path, "The webhook secret file").strip()
    if len(secret) < 16:
        raise ConfigError(f"The webhook secret file {path} holds fewer than 16 characters, which is not allowed: "
                          "write a long random secret, such as `openssl rand -hex 32`'s.")
    return secret.encode()
