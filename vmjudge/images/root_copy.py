"""The image skopeo copied, checked to be the one admission read before umoci reads a byte of
it (images/entry_root.py): whatever made the two read an archive differently, the root is made,
and stored under a chain ID, only from the layers admission checked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..archive.container_image import CheckedImage
from ..archive.image_layout import DOC_MAX, parse_json
from ..archive.image_layout import field as doc_field
from ..errors import EntryError, InfrastructureError


def _document(path: Path, what: str) -> Any:
    """A JSON document skopeo wrote, read within admission's bound."""
    try:
        with open(path, "rb") as f:
            body = f.read(DOC_MAX + 1)
    except OSError as exc:
        raise InfrastructureError("entry-root", f"skopeo wrote no readable {what} ({exc.strerror or exc}).") from exc
    if len(body) > DOC_MAX:
        raise EntryError("bad-image", f"The image's {what}, as skopeo copied it, is larger than the one admission "
                                      "read: save the image again with `docker save` or `podman save` and submit "
                                      "again.")
    return parse_json(body, what)


def check_copied(oci_dir: Path, image: CheckedImage) -> None:
    """The image skopeo wrote into `oci_dir` is the one admission read: one manifest, whose
    config lists the layers' digests admission checked (and, from an OCI archive, whose config and
    layers are the very blobs admission read, digest for digest). umoci then checks each layer
    against the config's digests as it applies it."""
    index = _document(oci_dir / "index.json", "index")
    manifests = doc_field(index, "manifests", list, "index")
    blob = oci_dir / "blobs" / "sha256"
    if len(manifests) != 1:
        raise EntryError("bad-image", "The image archive, read by skopeo, holds another image than the one admission "
                                      "read: save the image again with `docker save` or `podman save` and submit "
                                      "again.")
    digest = str(doc_field(manifests[0], "digest", str, "index")).removeprefix("sha256:")
    manifest = _document(blob / digest[:64], "manifest")
    config_digest = str(doc_field(doc_field(manifest, "config", dict, "manifest"), "digest", str, "manifest"))
    config = _document(blob / config_digest.removeprefix("sha256:")[:64], "config")
    diff_ids = doc_field(doc_field(config, "rootfs", dict, "config"), "diff_ids", list, "config")
    layers = [doc_field(layer, "digest", str, "manifest") for layer in doc_field(manifest, "layers", list, "manifest")]
    # An OCI archive's blobs are copied as they are; a docker save's layers are compressed on the way.
    same_blobs = image.format != "oci-archive" or (config_digest == image.image_id
                                                   and layers == [layer.digest for layer in image.layers])
    if diff_ids != [layer.diff_id for layer in image.layers] or not same_blobs:
        raise EntryError("bad-image", "The image archive, read by skopeo, holds another image than the one admission "
                                      "read (its tar headers read two ways): build the image with `docker build` or "
                                      "`podman build`, save it and submit again.")
