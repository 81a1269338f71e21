"""`vmjudge image export` / `image import`: one built image moved to another host unchanged.

Several hosts judge one queue, so they must judge with the same bits: a second build of the
same recipe is not the same image (mmdebstrap's timestamps, a package updated meanwhile).
The image's key depends on the recipe and vmjudge's code, never on the host, so the directory
built once can be copied to HOME/images/<key>/ elsewhere, where `find_image` finds it and
GuestImage.check() passes on the same sha256s.

The export is a plain tar (root.sqfs is compressed already) of the files the manifest pins
and the manifest itself, written as a whole file or not at all. The import reads it as
untrusted input with a reader of its own (tar_format.py), unpacks it beside the images and
renames it into place only once every byte matched the manifest, so a refused import leaves
nothing, and a killed one at most a hidden .import-* directory, which a lookup by key never
finds (its manifest, written last, is usually not even there).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import Challenge, ImageRecipe, Site
from ..errors import ImageError
from ..files import DurableFile, fsync_dir, sha256_file
from .build import BASE_PACKAGES, find_image, image_key, recipe_document
from .image import FILES, GuestImage
from .tar_format import TarWriter, read_members

MANIFEST = "manifest.json"
# The export's members, in this order: the manifest first, so a reader learns the key at once.
MEMBERS = (MANIFEST, *FILES)
# What an import accepts of each member. The base image is about 160 MB; a challenge's packages
# or a GPU driver make it larger, never by orders of magnitude beyond these.
LIMITS = {MANIFEST: 16 << 20, "root.sqfs": 64 << 30, "vmlinuz": 256 << 20, "initrd.img": 2 << 30}
KEY = re.compile(r"[0-9a-f]{20}")  # build.py's key: the first 20 hex digits of a sha256
SHA256 = re.compile(r"[0-9a-f]{64}")
SPARE = 64 << 20  # left free on the images' file system after each member is written


@dataclass(frozen=True)
class Transferred:
    """What export or import did: the image's key, where it is, and each member's sha256 and size."""

    key: str
    path: Path
    sha256: dict[str, str]
    sizes: dict[str, int]
    already_there: bool = False


def export_image(site: Site, challenge: Challenge, output: Path) -> Transferred:
    """Write the challenge's built image to `output` as one tar, durably; refuse one that is not
    built here, and one whose files no longer match their manifest (it would spread damage)."""
    try:
        image = find_image(site, challenge.image)
    except ImageError:
        if (site.layout.images / image_key(site, challenge.image) / MANIFEST).exists():
            raise  # built but damaged: find_image's sentence says what
        raise ImageError(f"the guest image of {challenge.name} is not built on this host, so there is nothing to "
                         f"export: run `vmjudge image build {challenge.directory}` first.") from None
    pinned = _pinned(image.manifest, f"the manifest in {image.directory}")
    try:
        sha256, sizes = _write_export(image, pinned, Path(output))
    except OSError as exc:
        raise ImageError(f"writing {output} failed ({_why(exc)}), and nothing was written: fix that and export "
                         "again.") from None
    return Transferred(image.key, Path(output), sha256, sizes)


def _write_export(image: GuestImage, pinned: dict[str, str], output: Path) -> tuple[dict[str, str], dict[str, int]]:
    sha256: dict[str, str] = {}
    sizes: dict[str, int] = {}
    with DurableFile(output.parent, f".{output.name}.", ".part", mode=0o644) as out:
        tar = TarWriter(out)
        for name in MEMBERS:
            with open(image.directory / name, "rb") as f:
                st = os.fstat(f.fileno())
                sha256[name] = tar.add(name, f, st.st_size, int(st.st_mtime))
                sizes[name] = st.st_size
            if name in pinned and sha256[name] != pinned[name]:
                raise ImageError(f"{image.directory / name} differs from its manifest (sha256 {sha256[name][:12]}…, "
                                 f"expected {pinned[name][:12]}…), so it is not exported: delete {image.directory} "
                                 "and build the image again.")
        tar.close()
        out.commit(output)
    return sha256, sizes


def import_image(site: Site, tar_path: Path, challenge: Challenge | None = None) -> Transferred:
    """Unpack an export into HOME/images/<key>/ once every member is checked (names, types,
    sizes, every sha256 against the manifest and, with `challenge`, the key against this host's
    for its recipe). The same image already there is success; a different one is refused."""
    tar_path = Path(tar_path)
    try:
        site.layout.ensure()
        return _import(site, tar_path, challenge)
    except OSError as exc:
        raise ImageError(f"importing {tar_path} failed ({_why(exc)}), and nothing was imported: fix that and import "
                         "again.") from None


def _import(site: Site, tar_path: Path, challenge: Challenge | None) -> Transferred:
    images = site.layout.images
    work = Path(tempfile.mkdtemp(prefix=".import-", dir=images))
    try:
        manifest_bytes, sha256, sizes = _unpack(tar_path, work)
        manifest = _manifest(manifest_bytes, tar_path)
        key = manifest["key"]
        for name in FILES:
            if sha256[name] != manifest["sha256"][name]:
                raise ImageError(f"{tar_path}'s {name} differs from its manifest (sha256 {sha256[name][:12]}…, "
                                 f"expected {manifest['sha256'][name][:12]}…): the copy is damaged; copy the file "
                                 "from the exporting host again, or export the image again there.")
        if challenge is not None:
            _check_key(site, challenge, manifest, tar_path)
        final = images / key
        if final.exists():  # looked at before the lock too, so a refusal leaves not even a lock file
            return _already_there(final, manifest, tar_path, sizes)
        # The manifest is written last: until then the directory is nothing a lookup takes for an image.
        _write(work / MANIFEST, [manifest_bytes])
        os.chmod(work, 0o755)  # as build.py leaves it: libvirt's qemu reads the kernel, initramfs and root
        fsync_dir(work)
        with open(images / f".{key}.lock", "w") as lock:  # the lock build_image holds while it builds this key
            fcntl.flock(lock, fcntl.LOCK_EX)
            if final.exists():
                return _already_there(final, manifest, tar_path, sizes)
            os.rename(work, final)
            fsync_dir(images)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return Transferred(key, final, {MANIFEST: _sha256(manifest_bytes), **sha256}, sizes)


def _unpack(tar_path: Path, work: Path) -> tuple[bytes, dict[str, str], dict[str, int]]:
    """Every member checked and the image's files written to `work` (the manifest is only kept
    in memory); their sha256s and sizes."""
    sha256: dict[str, str] = {}
    sizes: dict[str, int] = {}
    manifest = b""
    with open(tar_path, "rb") as f:
        for name, size, data in read_members(f, tar_path, LIMITS):
            sizes[name] = size
            if name == MANIFEST:
                manifest = b"".join(data)
                continue
            free = shutil.disk_usage(work).free
            if size + SPARE > free:
                raise ImageError(f"{work.parent} has {free / 1e6:.0f} MB free, too little for {tar_path}'s "
                                 f"{name} ({size / 1e6:.0f} MB): free some space and import again.")
            sha256[name] = _write(work / name, data)
    missing = [n for n in MEMBERS if n not in sizes]
    if missing:
        raise ImageError(f"{tar_path} lacks {', '.join(missing)}, so it is not a whole image export: export the "
                         "image again with `vmjudge image export`.")
    return manifest, sha256, sizes


def _write(path: Path, chunks: Iterable[bytes]) -> str:
    """A new file readable by libvirt's qemu, fsynced; the sha256 of what was written."""
    digest = hashlib.sha256()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "wb") as out:
        os.fchmod(fd, 0o644)  # whatever the umask
        for chunk in chunks:
            digest.update(chunk)
            out.write(chunk)
        out.flush()
        os.fsync(fd)
    return digest.hexdigest()


def _why(exc: OSError) -> str:
    return f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc.strerror or exc)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _pinned(manifest: Any, where: str) -> dict[str, str]:
    """The sha256 the manifest pins for each image file (GuestImage.verify checks the same)."""
    pinned = manifest.get("sha256") if isinstance(manifest, dict) else None
    if not (isinstance(pinned, dict) and set(pinned) == set(FILES)
            and all(isinstance(v, str) and SHA256.fullmatch(v) for v in pinned.values())):
        raise ImageError(f"{where} does not pin a sha256 for exactly {', '.join(FILES)}: it was not written by "
                         "`vmjudge image build`; build the image again where it came from and export it again.")
    return pinned


def _manifest(data: bytes, tar_path: Path) -> dict[str, Any]:
    """The imported manifest, parsed and checked for what the import relies on: a key that is a
    safe directory name, and a sha256 for each file."""
    try:
        manifest = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ImageError(f"{tar_path}'s manifest.json is not JSON: the copy is damaged or not an image export; "
                         "export the image again.") from None
    if not isinstance(manifest, dict) or not (isinstance(manifest.get("key"), str) and KEY.fullmatch(manifest["key"])):
        raise ImageError(f"{tar_path}'s manifest.json names no image key (20 hex digits): it was not written by "
                         "`vmjudge image build`; export the image again.")
    _pinned(manifest, f"{tar_path}'s manifest.json")
    return manifest


def _already_there(final: Path, manifest: dict[str, Any], tar_path: Path, sizes: dict[str, int]) -> Transferred:
    """The key is here already: the same bits are success, other bits a refusal (hosts must agree)."""
    try:
        here = GuestImage.load(final)
        pinned_here = _pinned(here.manifest, f"the manifest in {final}")
    except ImageError:
        raise ImageError(f"{final} is there but is not a whole image: remove it and import again.") from None
    if pinned_here != manifest["sha256"]:
        differ = [n for n in FILES if pinned_here[n] != manifest["sha256"][n]]
        verb = "differs" if len(differ) == 1 else "differ"
        raise ImageError(f"{final} holds another build of image {manifest['key']} ({', '.join(differ)} {verb}: "
                         f"sha256 {pinned_here[differ[0]][:12]}… here, {manifest['sha256'][differ[0]][:12]}… in "
                         f"{tar_path}), and every host must judge with the same bits: remove {final} and import again, "
                         "or export this host's image to the others instead.")
    hashes = {MANIFEST: sha256_file(final / MANIFEST), **{name: pinned_here[name] for name in FILES}}
    return Transferred(manifest["key"], final, hashes, sizes, already_there=True)


def _check_key(site: Site, challenge: Challenge, manifest: dict[str, Any], tar_path: Path) -> None:
    want = image_key(site, challenge.image)
    if manifest["key"] != want:
        raise ImageError(f"{tar_path} holds image {manifest['key']}, but this host's image for {challenge.name} "
                         f"is {want}: {_difference(site, challenge.image, manifest)}; nothing was imported.")


def _difference(site: Site, recipe: ImageRecipe, manifest: dict[str, Any]) -> str:
    """Why the keys differ, from what the manifest records of the recipe document build.py hashed:
    the challenge's [image] first, then the site's Debian sources, then vmjudge's own code."""
    doc = recipe_document(site, recipe)
    built = _table(manifest, "recipe")
    for field, here in (("packages", recipe.packages), ("pip", recipe.pip), ("components", recipe.components)):
        listed = built.get(field)
        there = listed if isinstance(listed, list) else []
        base = set(BASE_PACKAGES) if field == "packages" else set()  # always in the image, whether listed or not
        if (set(here) | base != set(there) | base) or (field == "components" and list(here) != there):
            only_here, only_there = sorted(set(here) - set(there) - base), sorted(set(there) - set(here) - base)
            what = (f"only here: {', '.join(only_here) or 'none'}; only in the image: "
                    f"{', '.join(map(str, only_there)) or 'none'}") if only_here or only_there else "in another order"
            return f"challenge.toml's [image] {field} differ ({what}): use the same challenge directory on both hosts"
    build = _table(manifest, "build")
    if built.get("build") != recipe.build or ("build" in doc and build.get("tree_sha256") != doc["build"]["tree"]):
        return ("the challenge's build script or a file under its image/ directory differs: use the same challenge "
                "directory on both hosts")
    if built.get("gpu") != recipe.gpu:
        return (f"challenge.toml's [image] gpu differs ({recipe.gpu} here, {built.get('gpu')} in the image): use the "
                "same challenge directory on both hosts")
    sources = manifest.get("sources")
    if manifest.get("suite") != doc["suite"] or sources != doc["sources"]:
        theirs = sources if isinstance(sources, list) else []
        pair = next(((a, b) for a, b in zip(doc["sources"], theirs, strict=False) if a != b),
                    (doc["sources"][0], "none"))
        return (f"the Debian sources differ (\"{pair[0]}\" here, \"{pair[1]}\" in the image): give site.toml's "
                "[image] mirror, security_mirror and suite the same values on both hosts")
    if manifest.get("code") != doc["code"]:
        return "the image was built by another version of vmjudge (its guest code differs): run the same one here"
    return ("its manifest records the same recipe, sources and guest code, so the hosts' vmjudge versions differ in "
            "what else the key covers (the base packages or the GPU driver's): run the same vmjudge on both")


def _table(manifest: dict[str, Any], name: str) -> dict[str, Any]:
    """A table of the imported manifest, or an empty one where it has none (or something else)."""
    value = manifest.get(name)
    return value if isinstance(value, dict) else {}
