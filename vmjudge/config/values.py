"""Reading a TOML file's tables so that every refusal names the file, the table, the key and
what is allowed: challenge.toml and site.toml share these rules, so their errors read alike.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import ConfigError


class Section:
    """Reads one table of a TOML file, naming file, table and key in every error."""

    def __init__(self, source: str, table: str, data: Any):
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: [{table}] must be a table of keys.")
        self.source, self.table, self.data = source, table, dict(data)

    def _where(self, key: str) -> str:
        return f"{self.source}: [{self.table}] {key}"

    def get(self, key: str, kind: type, default: Any, check: Callable[[Any], bool] | None = None,
            allowed: str = "") -> Any:
        if key not in self.data:
            return default
        written = value = self.data.pop(key)
        ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value, ok = float(value), True
        if not ok or (check is not None and not check(value)):  # quoted as written: 4, not 4.0
            raise ConfigError(f"{self._where(key)} = {written!r} is not allowed: use {allowed or kind.__name__}.")
        return value

    def names(self, key: str, pattern: re.Pattern[str], allowed: str) -> tuple[str, ...]:
        value = self.get(key, list, [], allowed=allowed)
        for item in value:
            if not isinstance(item, str) or not pattern.fullmatch(item):
                raise ConfigError(f"{self._where(key)} has {item!r}, which is not allowed: use {allowed}.")
        return tuple(value)

    def done(self) -> None:
        if self.data:
            keys = ", ".join(sorted(self.data))
            raise ConfigError(f"{self.source}: [{self.table}] has unknown key(s) {keys}: remove or correct them.")


def read_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{path} does not exist: give the path of a challenge directory holding "
                          "challenge.toml.") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML ({exc}): fix the syntax.") from None
