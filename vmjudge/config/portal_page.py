"""challenge.toml's [portal]: what the portal's page of the challenge shows and offers (issue 58).

Every download is off until the organiser turns it on, and signed-in participants only unless
`public`: a training set is often under a data-use agreement. The sample entry is a directory of
the challenge's own (an example entry), never one holding the test set or the reference; the
description a Markdown file of the challenge's, shown without any HTML of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .values import Section

DESCRIPTION_MAX = 256 * 1024  # bytes of Markdown: a page, not a data set


@dataclass(frozen=True)
class PortalPage:
    description: str | None = "README.md"  # a Markdown file of the challenge directory; None: none
    training: bool = False  # the training set as one archive (what the replica ISO carries)
    sample: str | None = None  # a directory of the challenge's, offered as the sample entry's archive
    replica: bool = False  # the replica ISO, built once per image when first asked for
    public: bool = False  # downloads to anyone, not only to signed-in participants
    team_size: int = 0  # members a team may have (queue/teams.py); 0: no teams, each person enters alone

    @property
    def downloads(self) -> bool:
        return self.training or self.sample is not None or self.replica


def _inside(directory: Path, rel: str) -> bool:
    path = (directory / rel).resolve()
    return path != directory and path.is_relative_to(directory)


def overlaps(path: Path, secrets: tuple[Path, ...]) -> bool:
    """Whether `path` is, holds or lies in one of `secrets` (every test set and reference of the
    challenge: Challenge.secret_dirs), links followed."""
    path = path.resolve()
    return any(path.is_relative_to(s.resolve()) or s.resolve().is_relative_to(path) for s in secrets)


def check_portal_files(source: str, directory: Path, page: PortalPage, secrets: tuple[Path, ...]) -> None:
    """What `challenge add` insists on of [portal]'s files (not load_challenge: the replica carries
    challenge.toml without them): the description a file of at most DESCRIPTION_MAX bytes, the sample
    a directory holding no test set or reference and in none."""
    if page.description is not None:
        path = directory / page.description
        if overlaps(path, secrets):  # the page is public
            raise ConfigError(f"{source}: [portal] description = {page.description!r} is, or links to, a file of a "
                              "test set or a reference, which never leave the judge: write the description apart.")
        if not path.is_file() or path.stat().st_size > DESCRIPTION_MAX:
            raise ConfigError(f"{source}: [portal] description = {page.description!r} must be a file of at most "
                              f"{DESCRIPTION_MAX // 1024} KiB in the challenge directory: write it, or set "
                              "description = \"\".")
    if page.sample is not None and not (directory / page.sample).is_dir():
        raise ConfigError(f"{source}: [portal] sample = {page.sample!r} is not a directory of the challenge's: "
                          "give the directory of an example entry, such as \"entries/good\".")
    if page.sample is not None and overlaps(directory / page.sample, secrets):
        raise ConfigError(f"{source}: [portal] sample = {page.sample!r} holds or lies in a test set or a reference, "
                          "which never leave the judge: give the directory of an example entry.")


def check_sample_kind(source: str, page: PortalPage, kind: str) -> None:
    if page.sample is not None and kind == "container":
        raise ConfigError(f"{source}: [portal] sample is for archive and submission entries, which it is packed as; a "
                          "container entry is an image its author saves: describe your template in the description.")


def portal_page(source: str, directory: Path, data: dict[str, Any]) -> PortalPage:
    sec = Section(source, "portal", data.get("portal", {}))
    default = "README.md" if (directory / "README.md").is_file() else None
    description = sec.get("description", str, default, lambda v: v == "" or _inside(directory, v),
                          "a Markdown file inside the challenge directory, such as \"README.md\" (\"\": none)")
    sample = sec.get("sample", str, None, lambda v: _inside(directory, v),
                     "a directory of the challenge's holding an example entry, such as \"entries/good\" "
                     "(never test/ or reference/)")
    page = PortalPage(description=description or None, training=sec.get("training", bool, False),
                      sample=sample, replica=sec.get("replica", bool, False), public=sec.get("public", bool, False),
                      team_size=sec.get("team_size", int, 0, lambda v: 0 <= v <= 100,
                                        "a whole number from 0 (no teams) to 100"))
    sec.done()
    return page
