"""The one way the `vmjudge` command prints: through terminal.printable, so no text an entry
or a submitter chose (setup.sh output, owner and archive names, quoted in reports, boards,
status lines and error messages) reaches the organiser's terminal as a control sequence.

Errors take this path too: the one-sentence VmjudgeError, and click's own usage errors,
which quote the arguments they were given.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

import click

from ..errors import VmjudgeError
from ..terminal import printable


def echo(message: str = "", err: bool = False, nl: bool = True) -> None:
    click.echo(printable(message), err=err, nl=nl)


class _Escaping:
    """A text stream that escapes what click writes to it (click prints usage errors itself)."""

    def __init__(self, stream: TextIO):
        self.stream = stream

    def write(self, text: str) -> int:
        return self.stream.write(printable(text))

    def flush(self) -> None:
        self.stream.flush()


@contextmanager
def errors_printed() -> Iterator[None]:
    """A VmjudgeError becomes "vmjudge: <sentence>" and exit status 1; a usage error is shown
    as click shows it, escaped, with click's exit status."""
    try:
        yield
    except VmjudgeError as exc:
        echo(f"vmjudge: {exc}", err=True)
        sys.exit(1)
    except click.ClickException as exc:
        exc.show(file=_Escaping(sys.stderr))  # type: ignore[arg-type]
        sys.exit(exc.exit_code)
