"""What the organiser writes down, read and checked once: challenge.toml (challenge.py; its
[entry] and [container], the kind of entry and its limits, in entry.py; [limits] in limits.py;
[image] in image.py; a contest's [[phase]] tables in phase.py; RECORDS files in records.py; [results]
and [quiz] in results.py; a container challenge's [[input]] and [[output]] sockets in sockets.py),
site.toml (site.py),
the TOML reading rules both share (values.py), where everything lives under the judge's home
(layout.py, imported from there), and a challenge directory's hashes, which every host sharing
a queue must match (fingerprint.py).

The names of challenge.toml and site.toml are re-exported, so that `from vmjudge.config
import Site, load_site` reads the same wherever it is written; this package is the one that does.
"""

from .challenge import (
                        DEFAULT_SCORE_OPTIONS,
                        Challenge,
                        ResultsRule,
                        ScoreOptions,
                        StageLimits,
                        VmShape,
                        check_challenge_data,
                        load_challenge,
)
from .entry import ContainerRules, EntryRules
from .image import ImageRecipe
from .phase import Phase
from .site import GpuSite, QueueSite, Retention, Site, WebSite, default_accel, default_home, load_site

__all__ = ["DEFAULT_SCORE_OPTIONS", "Challenge", "ContainerRules", "EntryRules", "GpuSite", "ImageRecipe", "Phase",
           "QueueSite", "ResultsRule", "Retention", "ScoreOptions", "Site", "StageLimits", "VmShape", "WebSite",
           "check_challenge_data", "default_accel", "default_home", "load_challenge", "load_site"]
