"""challenge.toml's [image], and a phase's [phase.image] over it: what goes into the guest root.

A contest's phases run in the challenge's image unless a phase says otherwise (a final phase
that offers a newer library, a phase judged on GPUs), so one reader serves both, with the
image a phase would otherwise have as the defaults of its table: each key it gives replaces
that one key, and the keys it leaves out are kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .entry import RELPATH_RE
from .values import Section

_PACKAGE_RE = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
_PIP_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,._-]+\])?((==|>=|<=|~=|!=|<|>)[A-Za-z0-9.*+!_-]+)?$")

# Debian's archive areas; "main" is where the base system comes from, so it is always one of them.
COMPONENTS = ("main", "contrib", "non-free", "non-free-firmware")
# [image] gpu: the guest driver an image may carry (Debian bookworm's Tesla 535 branch, the one
# Grand Challenge's T4 runs).
GPU_DRIVERS = ("nvidia-535",)


@dataclass(frozen=True)
class ImageRecipe:
    """What goes into the guest root besides vmjudge's own base.

    build names the challenge's own script (as written in challenge.toml, e.g.
    "image/build.sh"), which runs in the new root after the packages; build_dir is the
    challenge's image/ directory it is given. Software that is neither a Debian package nor
    a wheel (PhysioNet's WFDB tools, a driver) gets into the image this way."""

    packages: tuple[str, ...] = ()
    pip: tuple[str, ...] = ()
    components: tuple[str, ...] = ("main",)
    build: str | None = None
    build_dir: Path | None = None
    build_timeout: float = 1800.0
    gpu: str | None = None  # a GPU_DRIVERS name: the image carries that driver (images/gpu_driver.py)

    @property
    def build_script(self) -> str:
        """The script's path inside build_dir (the directory the build sees at /run/vmjudge-build)."""
        assert self.build is not None
        return self.build.split("/", 1)[1]


def image_recipe(source: str, directory: Path, table: str, data: Any,
                 base: ImageRecipe = ImageRecipe()) -> ImageRecipe:
    """The table `table` ("image", or "phase final.image") read over `base`: a key left out
    keeps base's value. A build script is always under the challenge's image/ directory, which
    the build is given whole."""
    image = Section(source, table, data)
    components = image.names("components", re.compile("^(" + "|".join(COMPONENTS) + ")$"),
                             "Debian archive areas among " + ", ".join(f'"{c}"' for c in COMPONENTS)) or ("main",) \
        if "components" in image.data else base.components
    if "main" not in components or len(set(components)) != len(components):
        raise ConfigError(f"{source}: [{table}] components = {list(components)!r} is not allowed: name each area "
                          "once, and \"main\" among them (the base system comes from it).")
    build = image.get("build", str, base.build, lambda v: bool(RELPATH_RE.fullmatch(v)) and v.startswith("image/"),
                      "the path of a script under the challenge's image/ directory, such as \"image/build.sh\"")
    timeout_given = "build_timeout" in image.data
    recipe = ImageRecipe(
        packages=image.names("packages", _PACKAGE_RE, "Debian package names such as \"python3-numpy\"")
        if "packages" in image.data else base.packages,
        pip=image.names("pip", _PIP_RE, "pip requirements such as \"wfdb==4.3.1\"") if "pip" in image.data
        else base.pip,
        components=components, build=build, build_dir=directory / "image" if build else None,
        build_timeout=image.get("build_timeout", float, base.build_timeout, lambda v: 1 <= v <= 86400,
                                "a number of seconds from 1 to 86400"),
        gpu=image.get("gpu", str, base.gpu, lambda v: v in GPU_DRIVERS, " or ".join(f'"{d}"' for d in GPU_DRIVERS)))
    image.done()
    if build is not None:
        script, image_dir = directory / build, (directory / "image").resolve()
        if not script.is_file() or not script.resolve().is_relative_to(image_dir):
            raise ConfigError(f"{source}: [{table}] build = {build!r} names no file under {image_dir}: "
                              "put the build script there, or correct the path.")
    elif timeout_given:
        raise ConfigError(f"{source}: [{table}] build_timeout is set but there is no build script: "
                          "add build = \"image/build.sh\" or remove build_timeout.")
    return recipe
