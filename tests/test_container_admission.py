"""Admitting a container entry (#39): image archives as `docker save` and `podman save` write
them, read without Docker (archive/container_image.py), and each hostile image refused with its
own sentence before anything of it is unpacked. Images are made by tests/oci_images.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from vmjudge.archive.container_image import CheckedImage, ImageLimits, chain_id, check_image
from vmjudge.config import Site, load_challenge
from vmjudge.errors import EntryError
from vmjudge.queue.admit import admit
from vmjudge.queue.db import Queue

from . import oci_images as oci
from .oci_images import Image, Layer, device, directory, fifo, file, hardlink, opaque, symlink, whiteout
from .test_spool import make_zip

BASE = [directory("bin"), file("bin/app", b"#!/bin/sh\necho hi\n", 0o755), directory("etc"),
        file("etc/config", b"a = 1\n"), hardlink("etc/config.link", "etc/config"), symlink("etc/alias", "/etc/config"),
        directory("home/user", uid=1000, gid=1000), file("home/user/notes", b"notes", uid=1000, gid=1000)]
TOP = [whiteout("etc/config.link"), opaque("home/user"), file("home/user/new", b"new"), file("bin/su", b"x", 0o4755),
       device("dev/null")]


def image(**kw) -> Image:
    kw.setdefault("entrypoint", ["/bin/app"])
    return Image([Layer.of(BASE), Layer.of(TOP, None)], workdir="/home/user", user="1000:1000", **kw)


def refusal(path: Path, limits: ImageLimits | None = None) -> str:
    with pytest.raises(EntryError) as info:
        check_image(path, limits or ImageLimits(), name=path.name)
    assert info.value.reason in ("bad-image", "bad-archive")
    return str(info.value)


# --- what is accepted -------------------------------------------------------------------

@pytest.mark.parametrize("writer, fmt", [(oci.docker_save, "docker-archive"), (oci.oci_archive, "oci-archive")])
@pytest.mark.parametrize("compress", [False, True])
def test_both_layouts_gzipped_or_not_are_read(tmp_path, writer, fmt, compress):
    img = image()
    checked = check_image(writer(tmp_path / "team-image.tar", img, compress))
    assert (checked.format, checked.gzipped) == (fmt, compress)
    assert checked.root_id == chain_id([x.diff_id for x in img.layers])
    assert [x.diff_id for x in checked.layers] == [x.diff_id for x in img.layers]
    assert [x.compression for x in checked.layers] == ["gzip", None]
    assert checked.config.command == ("/bin/app", "/bin/sh")
    assert (checked.config.workdir, checked.config.user) == ("/home/user", "1000:1000")
    assert checked.config.env == ("PATH=/usr/local/bin:/usr/bin:/bin",)
    assert checked.unpacked_bytes == sum(len(m.data) for m in BASE + TOP)
    assert (checked.devices, checked.setid, checked.dry_run) == (1, 1, False)
    assert (checked.architecture, checked.os) == ("amd64", "linux")


def test_the_root_is_named_alike_however_the_image_was_saved(tmp_path):
    """The chain ID names the layers' content: the same layers saved by docker (uncompressed
    layer tars) and as OCI (gzipped blobs) give one root, though the blobs differ."""
    plain = Image([Layer.of(BASE, None), Layer.of(TOP, None)])
    gzipped = Image([Layer.of(BASE), Layer.of(TOP)], cmd=["/bin/other"])
    a = check_image(oci.docker_save(tmp_path / "a-image.tar", plain))
    b = check_image(oci.oci_archive(tmp_path / "b-image.tar", gzipped))
    assert a.root_id == b.root_id
    assert [x.digest for x in a.layers] != [x.digest for x in b.layers]
    assert a.image_id != b.image_id  # the configs differ (their commands)


def test_docker_25_layout_is_read_by_its_manifest_json(tmp_path):
    path = oci.write_members(tmp_path / "new-image.tar", oci.docker25_members(image()))
    checked = check_image(path)
    assert checked.format == "docker-archive" and checked.manifest_digest is None


def test_a_layer_saved_twice_is_a_link_to_its_first_copy(tmp_path):
    """docker save writes a layer the image lists twice once, and a symbolic link for the other."""
    layer = Layer.of([file("x", b"x")], None)
    members = oci.docker_members(Image([layer, layer]))
    first, second = (n for n, _ in members if n.endswith("/layer.tar"))
    members = [(n, d) for n, d in members if n != second]
    path = oci.write_members(tmp_path / "dup-image.tar", members, links={second: "../" + first})
    checked = check_image(path)
    assert len(checked.layers) == 2 and checked.unpacked_bytes == 2


def test_the_dry_run_label(tmp_path):
    assert check_image(oci.oci_archive(tmp_path / "a-image.tar", image(labels={"org.vmjudge.dryrun": "1"}))).dry_run
    assert not check_image(oci.oci_archive(tmp_path / "b-image.tar",
                                           image(labels={"org.vmjudge.dryrun": "false"}))).dry_run


# --- hostile images, each refused in a sentence ------------------------------------------

def _one_layer(members, **kw):
    return lambda p: oci.oci_archive(p, Image([Layer.of(members)], **kw))


def _raw_layer(tar: bytes):
    return lambda p: oci.oci_archive(p, Image([Layer.raw(tar)]))


def _members(edit):
    """An OCI archive of image() with its members edited by `edit`."""
    return lambda p: oci.write_members(p, edit(oci.oci_members([image()])))


def _manifest_doc(members):
    index = json.loads(dict(members)["index.json"])
    hex_ = index["manifests"][0]["digest"].removeprefix("sha256:")
    return hex_, json.loads(dict(members)[f"blobs/sha256/{hex_}"])


def _with_manifest(members, manifest: bytes):
    """The members with the image's manifest replaced by `manifest` (and index.json naming it)."""
    old, _ = _manifest_doc(members)
    index = json.loads(dict(members)["index.json"])
    index["manifests"][0].update(digest="sha256:" + oci.sha256(manifest), size=len(manifest))
    out = [(n, d) for n, d in members if n not in ("index.json", f"blobs/sha256/{old}")]
    return out + [("index.json", json.dumps(index).encode()), (f"blobs/sha256/{oci.sha256(manifest)}", manifest)]


def _case_twins(members):
    _, manifest = _manifest_doc(members)
    text = json.dumps(manifest)[:-1] + ', "Layers": []}'
    return _with_manifest(members, text.encode())


def _missing_blob(members):
    _, manifest = _manifest_doc(members)
    return [(n, d) for n, d in members if n != "blobs/sha256/" + manifest["layers"][0]["digest"][7:]]


def _altered_blob(members):
    _, manifest = _manifest_doc(members)
    name = "blobs/sha256/" + manifest["layers"][1]["digest"][7:]  # the uncompressed layer: still a tar
    at = dict(members)[name].rindex(b"new")  # the file's data, after its header
    return [(n, d[:at] + b"NEW" + d[at + 3:] if n == name else d) for n, d in members]


def _json_bomb(members):
    _, manifest = _manifest_doc(members)
    manifest["annotations"] = {"x": "y" * (5 << 20)}
    return _with_manifest(members, json.dumps(manifest).encode())


def _deep_json(members):
    return [(n, b"[" * 100000 + b"]" * 100000 if n == "index.json" else d) for n, d in members]


def _two_docker_images(p):
    a, b = oci.docker_members(image()), oci.docker_members(image(cmd=["other"]))
    manifest = json.loads(dict(a)["manifest.json"]) + json.loads(dict(b)["manifest.json"])
    members = dict(a) | dict(b) | {"manifest.json": json.dumps(manifest).encode()}
    return oci.write_members(p, list(members.items()))


def _index_of_images(p):
    members = oci.oci_members([image()])
    _, manifest = _manifest_doc(members)
    index = {"schemaVersion": 2, "mediaType": oci.OCI_INDEX, "manifests": json.loads(dict(members)["index.json"])[
        "manifests"]}
    nested = json.dumps(index).encode()
    top = {"schemaVersion": 2, "manifests": [{"mediaType": oci.OCI_INDEX, "digest": "sha256:" + oci.sha256(nested),
                                              "size": len(nested)}]}
    members = [(n, json.dumps(top).encode() if n == "index.json" else d) for n, d in members]
    return oci.write_members(p, members + [(f"blobs/sha256/{oci.sha256(nested)}", nested)])


HOSTILE = {
    # whiteouts no tool writes
    "whiteout-of-the-directory-itself": (_one_layer([directory("etc"), file("etc/.wh..")]),
                                         "whiteout 'etc/.wh..', which would remove the directory itself or its parent"),
    "whiteout-of-the-root": (_one_layer([file(".wh..")]), "whiteout '.wh..', which would remove the directory itself"),
    "whiteout-of-the-parent": (_one_layer([file("a/.wh...")]), "whiteout 'a/.wh...'"),
    "whiteout-with-no-name": (_one_layer([file("a/.wh.")]), "whiteout 'a/.wh.'"),
    "aufs-hardlink-dir": (_one_layer([file(".wh..wh.plnk")]), "a name kept for the union file systems' own use"),
    "whiteout-directory": (_one_layer([directory(".wh.etc")]), "whiteout '.wh.etc', as a directory"),
    "inside-a-whiteout": (_one_layer([file(".wh.etc/passwd", b"x")]), "inside a directory named like a whiteout"),
    # links out of the root
    "hard-link-to-etc-shadow": (_one_layer([hardlink("shadow", "/etc/shadow")]),
                                "hard link to '/etc/shadow' that is absolute or climbs with '..'"),
    "hard-link-climbing": (_one_layer([hardlink("x", "../../x")]), "hard link to '../../x' that is absolute or climbs"),
    "hard-link-to-a-lower-layer": (lambda p: oci.oci_archive(p, Image([Layer.of([file("a", b"a")]),
                                                                       Layer.of([hardlink("b", "a")])])),
                                   "holds a hard link 'b' to 'a', which is not a file earlier in that layer"),
    "hard-link-to-a-directory": (_one_layer([directory("d"), hardlink("x", "d")]), "which is not a file earlier"),
    "hard-link-to-a-later-file": (_one_layer([hardlink("x", "a"), file("a")]), "which is not a file earlier"),
    # names
    "absolute-member": (_one_layer([file("/etc/passwd", b"root::0:0::/:/bin/sh\n")]),
                        "member '/etc/passwd' that is absolute or climbs with '..'"),
    "climbing-member": (_one_layer([file("../../escape", b"x")]), "member '../../escape' that is absolute or climbs"),
    "name-too-long": (_one_layer([file("a" * 256)]), "longer than vmjudge unpacks (3072 bytes, 255 a name)"),
    "path-too-long": (_one_layer([file("/".join(["b" * 200] * 16))]), "longer than vmjudge unpacks"),
    "too-deep": (_one_layer([file("/".join(["d"] * 257))]), "257 directories deep, deeper than the 256"),
    "same-member-twice": (_one_layer([file("a", b"1"), file("./a", b"2")]), "holds 'a' twice"),
    "root-as-a-file": (_one_layer([file(".")]), "a member for its root that is not a directory"),
    "outer-absolute": (lambda p: oci.write_members(p, [("/manifest.json", b"[]")]),
                       "holds a member named '/manifest.json', which no image tool writes"),
    "outer-climbing": (lambda p: oci.write_members(p, [("../manifest.json", b"[]")]),
                       "holds a member named '../manifest.json'"),
    # sizes
    "sparse-10-GiB": (_raw_layer(oci.sparse_layer("big", 10 << 30)), "a PAX header with the record 'GNU.sparse."),
    "declares-10-GiB": (_raw_layer(oci.declared_layer("big", 10 << 30)), "unpacks to more than 8,589,934,592 bytes"),
    "json-bomb-manifest": (_members(_json_bomb), "more than the 4 MiB vmjudge reads of a JSON document"),
    "deeply-nested-json": (_members(_deep_json), "index.json is not JSON that vmjudge reads"),
    "many-json-blobs": (_members(lambda ms: ms + [(f"blobs/sha256/{i:064x}", b"{" + bytes(4 << 20)[:-1])
                                                  for i in range(9)]), "more than 32 MiB of JSON documents"),
    "utf16-index": (_members(lambda ms: [(n, d.decode().encode("utf-16") if n == "index.json" else d) for n, d in ms]),
                    "index.json is not JSON that vmjudge reads ('utf-8' codec can't decode"),
    "nan-in-manifest": (_members(lambda ms: _with_manifest(ms, json.dumps(dict(_manifest_doc(ms)[1], x=float("nan")))
                                                            .encode())), "NaN is not JSON"),
    "too-many-layers": (lambda p: oci.oci_archive(p, Image([Layer.of([file(f"f{i}")]) for i in range(128)])),
                        "128 layers, more than the 127"),
    "no-layers": (lambda p: oci.oci_archive(p, Image([])), "has no layers"),
    # what the image is
    "missing-blob": (_members(_missing_blob), "which the archive does not hold (a blob left out"),
    "altered-blob": (_members(_altered_blob), "Layer 2 of the image does not match its digest"),
    "lying-diff-id": (lambda p: oci.docker_save(p, Image([Layer.of(BASE)], diff_ids=["sha256:" + "0" * 64])),
                      "Layer 1 of the image does not match the digest its config lists"),
    "arm64": (lambda p: oci.docker_save(p, image(architecture="arm64")),
              "built for linux/arm64, and the judge runs linux/amd64"),
    "windows": (lambda p: oci.oci_archive(p, image(os="windows")), "built for windows/amd64"),
    "two-docker-images": (_two_docker_images, "holds 2 images, and an entry is one image"),
    "two-oci-images": (lambda p: oci.write_members(p, oci.oci_members([image(), image(cmd=["b"])])),
                       "holds 2 images"),
    "image-index": (_index_of_images, "holds an image index (an image for several platforms)"),
    "case-twin-keys": (_members(_case_twins), "the key 'Layers' appears twice (letter case aside)"),
    "zstd-layer": (lambda p: oci.oci_archive(p, Image([Layer.of(BASE, "zstd")])), "zstd-compressed"),
    "gzip-named-plain": (lambda p: oci.oci_archive(p, Image([Layer(Layer.of(BASE).blob, Layer.of(BASE).diff_id,
                                                                    oci.LAYER_TAR)])),
                         "Layer 1 of the image is gzip-compressed where its manifest says "
                         "application/vnd.oci.image.layer.v1.tar"),
    "xz-outer": (lambda p: (p.write_bytes(b"\xfd7zXZ\0" + bytes(100)), p)[1], "The image archive is xz-compressed"),
    "not-a-tar": (lambda p: (p.write_bytes(b"hello, judge" * 100), p)[1], "is not a readable image archive"),
    "no-image": (lambda p: oci.write_members(p, [("repositories", b"{}")]), "The archive holds no image"),
    "a-file-no-tool-saves": (lambda p: oci.write_members(p, oci.oci_members([image()]) + [("readme.txt", b"hi")]),
                             "holds a file 'readme.txt', which is not one of the files `docker save`"),
    "two-tars-joined": (lambda p: (p.write_bytes(oci.oci_archive(p, image()).read_bytes() * 2), p)[1],
                        "data after the end"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_images_are_refused_in_a_sentence(tmp_path, case):
    make, words = HOSTILE[case]
    message = refusal(make(tmp_path / "team-image.tar"))
    assert words in message
    assert message.count(". ") <= 1 and message.endswith("submit again.")  # one sentence, saying what to do


def test_an_outer_link_named_must_stay_inside(tmp_path):
    members = oci.docker_members(image())
    manifest = json.loads(dict(members)["manifest.json"])
    escape = "e" * 64 + "/layer.tar"
    manifest[0]["Layers"][0] = escape
    members = [(n, json.dumps(manifest).encode()) if n == "manifest.json" else (n, d) for n, d in members]
    members = [(n, d) for n, d in members if n != next(x for x in manifest[0]["Layers"] if x != escape)]
    path = oci.write_members(tmp_path / "link-image.tar", members, links={escape: "../../../etc/passwd"})
    assert f"names its layer as '{escape}', which the archive does not hold" in refusal(path)


def test_members_over_the_limit_are_refused(tmp_path):
    path = oci.oci_archive(tmp_path / "many-image.tar", Image([Layer.of([file(f"f{i}") for i in range(50)])]))
    assert "more than 40 files in its layers" in refusal(path, ImageLimits(max_members=40))
    assert check_image(path, ImageLimits(max_members=60)).members == 50 + 5  # the layer's and the archive's


def test_devices_setuid_and_escaping_symlinks_pass_admission_to_be_neutralised_at_unpack(tmp_path):
    """What the root is made without (entry_root.py) is counted, not refused: base images have
    carried /dev entries, and a symbolic link is read inside the entry's root."""
    layers = [Layer.of([symlink("a", "/tmp/x"), device("dev/sda", "b", 8, 0), fifo("run/pipe")]),
              Layer.of([file("a/f", b"through the link"), file("bin/su", b"x", 0o6755)])]
    checked = check_image(oci.oci_archive(tmp_path / "x-image.tar", Image(layers)))
    assert (checked.devices, checked.setid) == (2, 1)


# --- admission, through the real admit --------------------------------------------------

class Home:
    def __init__(self, tmp_path: Path, toml: str):
        self.path = tmp_path / "home"
        self.path.mkdir(parents=True)
        challenge = tmp_path / "ctr"
        challenge.mkdir()
        (challenge / "challenge.toml").write_text('name = "ctr"\n' + toml)
        self.challenge = load_challenge(challenge)
        self.site = Site(home=self.path)
        self.queue = Queue(self.path / "queue.db")
        self.queue.add_challenge("ctr", challenge, "key")

    def admit(self, archive: Path, owner: str = "alice", rate_limited: bool = False):
        return admit(self.site, self.queue, "ctr", self.challenge, archive, owner, False, rate_limited=rate_limited)


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_each_hostile_image_is_refused_at_upload_and_takes_no_place(tmp_path, case):
    """#58's container equivalents of the broken archives: refused by upload's admission (the portal's and
    `submit`'s) with the sentence, nothing queued or spooled, and no pending place taken (one allowed)."""
    home = Home(tmp_path, '[entry]\nkind = "container"\n[limits]\npending_per_owner = 1\n')
    make, words = HOSTILE[case]
    with pytest.raises(EntryError) as caught:
        home.admit(make(tmp_path / "team-image.tar"), rate_limited=True)
    assert words in str(caught.value)
    assert home.queue.entries() == [] and sorted(home.path.glob("spool/*/*")) == []
    assert home.admit(oci.oci_archive(tmp_path / "good-image.tar", image()), rate_limited=True).entry_id == 1


def test_a_container_challenge_admits_a_saved_image(tmp_path):
    home = Home(tmp_path, '[entry]\nkind = "container"\n')
    admitted = home.admit(oci.docker_save(tmp_path / "alice-image.tar.gz", image(), compress=True))
    assert not admitted.dry_run
    entry = home.queue.entry(admitted.entry_id)
    assert entry.archive_name == "alice-image.tar.gz" and entry.archive_path.endswith(".image.tar.gz")
    dry = home.admit(oci.oci_archive(tmp_path / "bob-image.tar", image(labels={"org.vmjudge.dryrun": "yes"})), "bob")
    assert dry.dry_run


def test_each_kind_refuses_the_others_names(tmp_path):
    home = Home(tmp_path, '[entry]\nkind = "container"\n')
    with pytest.raises(EntryError, match=r"Improper name \(alice-entry.zip\) for a container entry: give the saved "
                                         r"image a name ending in .tar or .tar.gz"):
        home.admit(make_zip(tmp_path / "alice-entry.zip", {"setup.sh": b"true\n", "next.sh": b"true\n"}))
    archive_home = Home(tmp_path / "b", "")
    with pytest.raises(EntryError, match=r"Improper name \(alice-image.tar\) for entry: name it entry.zip"):
        archive_home.admit(oci.oci_archive(tmp_path / "alice-image.tar", image()))
    assert home.queue.entries() == [] and archive_home.queue.entries() == []
    assert list(home.path.glob("spool/*/*")) == []


def test_an_image_with_no_command_needs_the_challenges(tmp_path):
    bare = Image([Layer.of(BASE)], cmd=None)
    home = Home(tmp_path, '[entry]\nkind = "container"\n')
    with pytest.raises(EntryError, match="The image names no command to run"):
        home.admit(oci.oci_archive(tmp_path / "a-image.tar", bare))
    commanded = Home(tmp_path / "b", '[entry]\nkind = "container"\n[container]\ncommand = ["/bin/app"]\n')
    assert commanded.admit(oci.oci_archive(tmp_path / "b-image.tar", bare)).entry_id


def test_any_tar_name_docker_save_or_grand_challenge_gives_is_taken(tmp_path):
    """Grand Challenge's template's do_save.sh names the image <tag>_<time>.tar.gz; docker save -o
    any name. Each is admitted and stored, and what is not a tar name is still refused."""
    home = Home(tmp_path, '[entry]\nkind = "container"\n')
    for i, name in enumerate(["example-algorithm_2026-12-04T18-00-00.tar.gz", "model.tar", "my.image.tgz"]):
        path = oci.docker_save(tmp_path / name, image(cmd=[f"/bin/{i}"]), compress=name.endswith("gz"))
        entry = home.queue.entry(home.admit(path).entry_id)
        assert entry.archive_name == name and Path(entry.archive_path).is_file()
    for name in ("model.zip", "model.tar.xz", "model"):
        with pytest.raises(EntryError, match=rf"Improper name \({re.escape(name)}\) for a container entry"):
            home.admit(oci.docker_save(tmp_path / name, image()))


def test_the_challenges_limits_apply(tmp_path):
    home = Home(tmp_path, '[entry]\nkind = "container"\nmax_unpacked = 20\n')
    with pytest.raises(EntryError, match="The image unpacks to more than 20 bytes"):
        home.admit(oci.oci_archive(tmp_path / "a-image.tar", image()))
    small = Home(tmp_path / "b", '[entry]\nkind = "container"\nmax_size = 1000\n')
    with pytest.raises(EntryError, match=r"a-image.tar is [\d,]+ bytes, over the 1,000 bytes that ctr accepts"):
        small.admit(tmp_path / "a-image.tar")


def test_checked_image_records_what_prep_needs(tmp_path):
    checked: CheckedImage = check_image(oci.oci_archive(tmp_path / "a-image.tar", image()))
    doc = checked.as_dict()
    assert doc["root_id"] == checked.root_id and doc["manifest_digest"].startswith("sha256:")
    assert doc["config"] == {"entrypoint": ["/bin/app"], "cmd": ["/bin/sh"],
                             "env": ["PATH=/usr/local/bin:/usr/bin:/bin"], "workdir": "/home/user", "user": "1000:1000"}
