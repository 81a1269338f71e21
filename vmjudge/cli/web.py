"""`vmjudge web`: the participants' portal (vmjudge/web), served by uvicorn in this process.

Meant to sit behind a TLS proxy (docs/participants.md: "The portal and its API"), so session cookies are
marked Secure by default; --no-secure-cookies is for plain http on loopback (tests, a look at
it on the judge's own machine).
"""

from __future__ import annotations

import click

from ..errors import VmjudgeError
from ..web.app import create_app
from ..web.server import serve
from .home import site_of


def _listen(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise VmjudgeError(f"--listen {value!r} is not an address vmjudge reads: give HOST:PORT, such as "
                           "127.0.0.1:8080.")
    return host.strip("[]"), int(port)


@click.command("web")
@click.option("--listen", default="127.0.0.1:8080", show_default=True, help="HOST:PORT to serve on.")
@click.option("--secure-cookies/--no-secure-cookies", default=True, show_default=True,
              help="Mark the session cookie Secure (the portal is reached over TLS, through a proxy).")
@click.pass_context
def web(ctx: click.Context, listen: str, secure_cookies: bool) -> None:
    """Serve the participants' portal: sign in, upload, follow entries, reports, boards."""
    host, port = _listen(listen)
    site = site_of(ctx)
    serve(create_app(site, secure_cookies=secure_cookies), host, port, site.web)
