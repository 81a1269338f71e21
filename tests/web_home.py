"""A portal to test against: a real home (SQLite, or PostgreSQL through site.toml), real
challenges registered in its queue, real owners, and starlette's TestClient on the real app.
No VM: the entries are only admitted."""

from __future__ import annotations

import secrets
from pathlib import Path

from starlette.testclient import TestClient

from vmjudge.config import load_challenge, load_site
from vmjudge.queue.db import Queue
from vmjudge.queue.owners import Owners
from vmjudge.replica.downloads import made

from .cli import run_cli
from .test_spool import make_tar, make_zip
from .web_process import CSRF

# Each challenge's challenge.toml beyond its name: "adm" takes small archives and one scored
# entry per owner; "big" takes larger ones; "rl" takes 2 entries an hour.
CHALLENGES = {
    "adm": "[entry]\nmax_size = 65536\nmax_scored_per_owner = 1\n",
    "big": "[entry]\nmax_size = 1048576\n",
    "rl": "[entry]\nmax_size = 65536\n[limits]\nsubmissions_per_hour = 2\n",
}


def good_files(marker: str = "") -> dict[str, bytes]:
    return {"setup.sh": b"true\n", "next.sh": f"echo {marker}\n".encode()}


class WebHome:
    def __init__(self, root: Path, location: str | Path | None = None):
        self.root = root
        self.home = root / "home"
        self.home.mkdir()
        if isinstance(location, str):
            (self.home / "site.toml").write_text(f'[queue]\nurl = "{location}"\n')
        self.site = load_site(self.home)
        self.site.layout.ensure()
        self.queue = Queue(self.site.queue.url or self.site.layout.queue_db, host=self.site.queue.host)
        for name, toml in CHALLENGES.items():
            directory = root / name
            directory.mkdir()
            (directory / "challenge.toml").write_text(f'name = "{name}"\n{toml}')
            self.queue.add_challenge(name, directory, "key")
        self.owners = Owners(self.queue.database)
        self.archives = root / "archives"
        self.archives.mkdir()

    def app(self, secure_cookies: bool = False):
        from vmjudge.web.app import create_app  # test_owners.py needs no portal
        return create_app(self.site, secure_cookies=secure_cookies)

    def client(self) -> TestClient:
        return TestClient(self.app(), raise_server_exceptions=False, follow_redirects=False)

    def tar(self, name: str, files: dict[str, bytes] | None = None) -> Path:
        return make_tar(self.archives / name, files if files is not None else good_files(secrets.token_hex(4)))

    def zip(self, name: str, files: dict[str, bytes]) -> Path:
        return make_zip(self.archives / name, files)

    def register(self, name: str, directory: Path) -> None:
        """Register `directory` as `vmjudge challenge add` does, but for its image: the training set's and
        the sample's archives made (replica/downloads.py), which the portal only serves."""
        self.queue.add_challenge(name, directory, "key")
        ch = load_challenge(directory)
        for view in [ch.in_phase(p.name) for p in ch.phases] or [ch]:
            for what in [w for w, on in (("training", view.portal.training), ("sample", view.portal.sample)) if on]:
                made(self.site, view, what)

    def vmjudge(self, *args: str):
        return run_cli(*args, home=self.home)

    def spooled(self) -> list[Path]:
        return sorted(p for p in self.site.layout.spool.rglob("*") if p.is_file())

    def uploads_left(self) -> list[Path]:
        uploads = self.home / "uploads"
        return sorted(uploads.rglob("*")) if uploads.exists() else []


def csrf_of(client: TestClient, path: str = "/signin") -> str:
    found = CSRF.search(client.get(path).text)
    assert found, f"no CSRF token on {path}"
    return found.group(1)


def sign_in(client: TestClient, token: str):
    return client.post("/signin", data={"token": token, "csrf": csrf_of(client)})


def upload(client: TestClient, archive: Path, challenge: str = "adm", late: bool = False,
           csrf: str | None = "fetch"):
    data = {"challenge": challenge} | ({"late": "1"} if late else {})
    if csrf == "fetch":
        data["csrf"] = csrf_of(client, "/upload")
    elif csrf is not None:
        data["csrf"] = csrf
    return client.post("/upload", data=data, files={"archive": (archive.name, archive.read_bytes())})


def multipart(*parts: tuple[str, bytes | None, bytes], boundary: str = "vmjudge-test-boundary") -> tuple[bytes, str]:
    """A multipart/form-data body written byte for byte, (name, filename or None, value) a part:
    clients escape what a hostile one would send raw (a NUL, a quote) in a file name."""
    body = []
    for name, filename, value in parts:
        disposition = f'form-data; name="{name}"'.encode() + (b'; filename="' + filename + b'"' if filename else b"")
        body.append(f"--{boundary}\r\n".encode() + b"Content-Disposition: " + disposition + b"\r\n\r\n" + value
                    + b"\r\n")
    return b"".join(body) + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"
