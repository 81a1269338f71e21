"""The challenges' pages and downloads (#58): the home page and GET /api/challenges list them; a
challenge's page shows the organiser's description without any HTML of its own, the rules, the
phases, the scorer and the downloads; the training set's archive holds exactly the challenge's
training files (what the replica carries), made once with its sha256; the sample entry's archive is
an entry upload takes; and no route serves a byte of a test record or of the reference. The
replica's download is in tests/test_replica.py, where the judge's image is built."""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import tarfile
import zipfile
from pathlib import Path

import pytest
from starlette.routing import Route

from vmjudge.config import check_challenge_data, load_challenge
from vmjudge.errors import ConfigError
from vmjudge.replica.build import training_files

from .phased import contest_dir
from .waiting import wait_until
from .web_home import WebHome, sign_in, upload

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "af2017"
DESCRIPTION = ("# The AF challenge\n\nClassify **each** record. <script>alert('x')</script>\n\n"
               "[a link](javascript:alert(1)) <img src=x onerror=alert(2)>\n")


@pytest.fixture
def portal(tmp_path):
    web = WebHome(tmp_path)
    directory = tmp_path / "af2017"
    shutil.copytree(EXAMPLE, directory, symlinks=True)
    (directory / "README.md").write_text(DESCRIPTION)
    web.register("af2017", directory)
    token = web.vmjudge("owner", "add", "alice").stdout.strip().split()[-1]
    return web, directory, token


def members(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def test_the_home_page_and_the_api_list_every_challenge(portal):
    web, _, _ = portal
    client = web.client()
    home = client.get("/")
    assert home.status_code == 200
    assert all(f'href="/challenges/{name}"' in home.text for name in ("adm", "af2017", "big", "rl"))
    listed = client.get("/api/challenges").json()["challenges"]
    assert [c["name"] for c in listed] == ["adm", "af2017", "big", "rl"]
    assert listed[1] == {"name": "af2017", "kind": "archive", "phases": [], "url": "/challenges/af2017"}


def test_the_page_shows_the_description_without_its_html_and_the_rules(portal):
    web, _, _ = portal
    page = web.client().get("/challenges/af2017")
    assert page.status_code == 200
    assert "<h1>The AF challenge</h1>" in page.text and "<strong>each</strong>" in page.text
    assert "<script>alert" not in page.text and "&lt;script&gt;" in page.text
    assert "<img" not in page.text and 'href="javascript:' not in page.text
    assert "setup.sh, next.sh, answers.txt, AUTHORS.txt, LICENSE.txt" in page.text
    assert "Scorer af2017, higher first. Built-in scorer \"af2017\"" in page.text.replace("&#34;", '"')
    assert 'id="runtime">The judge describes its runtime here once' in page.text  # no image built on this host
    doc = web.client().get("/api/challenges/af2017").json()
    assert doc["required"] == ["setup.sh", "next.sh", "answers.txt", "AUTHORS.txt", "LICENSE.txt"]
    assert doc["scorer"] == "af2017" and doc["runtime"] is None and doc["downloads"]["signed_in_only"] is True
    assert [d["what"] for d in doc["downloads"]["files"]] == ["training", "sample", "replica"]
    assert web.client().get("/challenges/nothing").status_code == 404
    assert web.client().get("/challenges/af2017?phase=nope").status_code == 404


def test_the_training_archive_is_the_training_set_made_once_with_its_sha256(portal):
    web, directory, token = portal
    client = web.client()
    assert client.get("/challenges/af2017/download/training").status_code == 401  # signed-in participants only
    bearer = client.get("/challenges/af2017/download/training", headers={"Authorization": f"Bearer {token}"})
    assert bearer.status_code == 200  # as curl fetches it
    assert client.get("/challenges/af2017/download/training",
                      headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert sign_in(client, token).status_code == 303
    got = client.get("/challenges/af2017/download/training")
    assert got.status_code == 200
    assert got.headers["x-content-sha256"] == hashlib.sha256(got.content).hexdigest()
    expected = training_files(load_challenge(directory))
    assert members(got.content) == {name: path.read_bytes() for name, path in expected.items()}
    assert "training/REFERENCE.csv" in expected and len(expected) == 18
    made = sorted((web.home / "downloads").glob("af2017-training-*.tar.gz"))
    assert len(made) == 1
    stamp = made[0].stat().st_mtime_ns
    again = client.get("/challenges/af2017/download/training")
    assert again.content == got.content and made[0].stat().st_mtime_ns == stamp  # kept, not made again
    page = client.get("/challenges/af2017").text
    assert got.headers["x-content-sha256"] in page and f"{len(got.content):,} bytes" in page
    # Files changed since are offered once `challenge add` runs again; the same files give the same bytes, so a
    # participant can compare sha256s across hosts.
    (directory / "training" / "A0001.hea").touch()
    web.register("af2017", directory)
    third = client.get("/challenges/af2017/download/training")
    assert third.content == got.content and len(list((web.home / "downloads").glob("af2017-training*.tar.gz"))) == 2


def made_aside(client, url: str):
    """The answer once the download is made aside (202, saying so, while it is)."""
    def answered():
        got = client.get(url)
        assert got.status_code != 202 or "is being made" in got.text
        return got if got.status_code != 202 else None
    return wait_until(answered, 120, f"{url} made aside")


def test_a_download_not_made_at_challenge_add_is_made_aside_when_first_asked_for(tmp_path):
    web = WebHome(tmp_path)
    directory = tmp_path / "af2017"
    shutil.copytree(EXAMPLE, directory)
    web.queue.add_challenge("af2017", directory, "key")  # registered by a vmjudge before downloads
    client = web.client()
    sign_in(client, web.owners.add("ana"))
    assert "(made when first asked for)" in client.get("/challenges/af2017").text
    got = made_aside(client, "/challenges/af2017/download/training")
    assert got.status_code == 200 and got.content[:2] == b"\x1f\x8b"


def test_the_sample_entry_downloads_as_an_archive_upload_takes(portal):
    web, directory, token = portal
    client = web.client()
    sign_in(client, token)
    got = client.get("/challenges/af2017/download/sample")
    assert got.status_code == 200
    files = members(got.content)
    assert files == {p.relative_to(directory / "entries" / "good").as_posix(): p.read_bytes()
                     for p in (directory / "entries" / "good").rglob("*") if p.is_file()}
    assert got.headers["content-disposition"] == 'attachment; filename="af2017-sample-entry.tar.gz"'
    archive = web.archives / "af2017-sample-entry.tar.gz"
    archive.write_bytes(got.content)
    with tarfile.open(archive) as tar:
        assert tar.getmember("setup.sh").mode & 0o111  # the scripts stay runnable
    assert upload(client, archive, challenge="af2017").status_code == 201


def test_a_download_not_offered_is_not_found_and_public_ones_need_no_sign_in(portal):
    web, directory, _ = portal
    toml = directory / "challenge.toml"
    toml.write_text(toml.read_text().replace('replica = true', 'replica = false\npublic = true'))
    client = web.client()
    assert client.get("/challenges/af2017/download/replica").status_code == 404
    assert client.get("/challenges/af2017/download/test").status_code == 404
    assert client.get("/challenges/af2017/download/training").status_code == 200
    assert client.get("/challenges/adm/download/training").status_code == 404  # adm offers nothing


@pytest.mark.parametrize("link", [os.symlink, os.link])
def test_a_link_from_the_training_set_into_the_test_set_stops_the_download(tmp_path, caplog, link):
    web = WebHome(tmp_path)
    directory = tmp_path / "af2017"
    shutil.copytree(EXAMPLE, directory)
    (directory / "training" / "A0001.dat").unlink()
    link(directory / "test" / "B0001.dat", directory / "training" / "A0001.dat")
    with pytest.raises(ConfigError, match="is, or links to, a file of a test set or a reference"):
        web.register("af2017", directory)  # `challenge add` refuses it
    client = web.client()
    sign_in(client, web.owners.add("ana"))
    got = made_aside(client, "/challenges/af2017/download/training")  # the portal's own making refuses it too
    assert got.status_code == 503 and "the organisers are told in the judge&#x27;s log" in got.text
    assert "is, or links to, a file of a test set or a reference" in caplog.text
    assert not list((web.home / "downloads").glob("*.tar.gz"))


def secret_bytes(directory: Path) -> dict[bytes, str]:
    """Each test and reference file's content, and each of its lines of 8 bytes or more."""
    found = {}
    for part in ("test", "reference"):
        for f in (directory / part).rglob("*"):
            if f.is_file() and f.name != "RECORDS":
                data = f.read_bytes()
                found[data] = str(f)
                found |= {line: str(f) for line in data.splitlines() if len(line) >= 8}
    return found


def test_no_route_serves_a_byte_of_the_test_set_or_the_reference(portal):
    web, directory, token = portal
    client = web.client()
    sign_in(client, token)
    secrets = secret_bytes(directory)
    assert len(secrets) > 16
    answers = {}
    for route in web.app().routes:
        if not isinstance(route, Route) or "GET" not in (route.methods or ()):
            continue
        for what in ("training", "sample", "replica", "test", "reference"):
            url = route.path.replace("{challenge}", "af2017").replace("{what}", what).replace("{entry_id}", "1")
            answers[url] = client.get(url).content
    assert len(answers) > 20 and answers["/challenges/af2017/download/training"][:2] == b"\x1f\x8b"
    for url, body in answers.items():
        shown = members(body) if body[:2] == b"\x1f\x8b" else {"": body}
        for name, data in shown.items():
            assert not re.search(r"(^|/)(test|reference)/", name), (url, name)
            for secret, where in secrets.items():
                assert secret not in data, f"{url} {name} holds bytes of {where}"


def test_the_portal_table_is_checked_when_the_challenge_is_read(tmp_path):
    directory = tmp_path / "af2017"
    shutil.copytree(EXAMPLE, directory)
    toml = directory / "challenge.toml"
    text = toml.read_text()
    for value, said in (('"test"', "holds or lies in a test set or a reference"),
                        ('"."', "a directory of the challenge's holding an example entry"),
                        ('"../.."', "a directory of the challenge's holding an example entry"),
                        ('"README.md"', "is not a directory of the challenge's")):
        toml.write_text(text.replace('sample = "entries/good"', f"sample = {value}"))
        with pytest.raises(ConfigError, match=re.escape(said)):
            check_challenge_data(load_challenge(directory))  # `challenge add`'s checks
    for secret in ("reference/REFERENCE.csv", "test/B0001.hea"):
        toml.write_text(text.replace("[portal]", f'[portal]\ndescription = "{secret}"'))
        with pytest.raises(ConfigError, match="is, or links to, a file of a test set or a reference"):
            check_challenge_data(load_challenge(directory))
    toml.write_text(text.replace("[portal]", '[portal]\ndescription = "NOTES.md"'))
    with pytest.raises(ConfigError, match="must be a file of at most 256 KiB"):
        check_challenge_data(load_challenge(directory))
    (directory / "entries" / "good").rename(directory / "elsewhere")  # the replica: challenge.toml without them
    assert load_challenge(directory).portal.description == "NOTES.md"
    toml.write_text(text.replace("[portal]", "[portal]\ndownloads = true"))
    with pytest.raises(ConfigError, match=r"\[portal\] has unknown key\(s\) downloads"):
        load_challenge(directory)


def test_a_submissions_sample_is_a_zip_upload_takes(tmp_path):
    web = WebHome(tmp_path)
    directory = tmp_path / "drivendata-style"
    shutil.copytree(REPO / "examples" / "drivendata-style", directory)
    web.register("drivendata-style", directory)
    client = web.client()
    sign_in(client, web.vmjudge("owner", "add", "ana").stdout.strip().split()[-1])
    got = client.get("/challenges/drivendata-style/download/sample")
    assert got.headers["content-disposition"] == 'attachment; filename="drivendata-style-sample-submission.zip"'
    with zipfile.ZipFile(io.BytesIO(got.content)) as z:
        assert z.namelist() == ["main.py"]
        assert z.read("main.py") == (directory / "entries" / "benchmark" / "main.py").read_bytes()
    archive = web.archives / "drivendata-style-sample-submission.zip"
    archive.write_bytes(got.content)
    assert upload(client, archive, challenge="drivendata-style").status_code == 201
    training = members(client.get("/challenges/drivendata-style/download/training").content)
    assert "training/submission_format.csv" in training


def test_a_phase_that_has_not_opened_gives_nothing_but_to_the_organisers(tmp_path):
    web = WebHome(tmp_path)
    directory = contest_dir(tmp_path, sanity="opens = 2099-01-01T00:00:00Z")
    toml = directory / "challenge.toml"
    toml.write_text(toml.read_text() + "\n[portal]\ntraining = true\n")
    web.register("contest", directory)
    ana, olga = web.client(), web.client()
    sign_in(ana, web.owners.add("ana"))
    sign_in(olga, web.owners.add("olga", organiser=True))
    refused = ana.get("/challenges/contest/download/training?phase=sanity")
    assert refused.status_code == 404 and "has not opened" in refused.text
    assert olga.get("/challenges/contest/download/training?phase=sanity").status_code == 200
