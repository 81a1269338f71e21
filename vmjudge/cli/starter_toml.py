"""The challenge.toml that `vmjudge challenge new` writes: the keys the sample needs set, and every
other key of challenge.toml beside them as a comment with its default, so that an author reads in
one file what can be changed instead of searching the reference for a key's name.
"""

from __future__ import annotations

_ANSWER_LINES = """\
[results]
style = "answer-lines"          # next.sh RECORD appends "RECORD,LABEL" to answers.txt
submitted = "answers.txt"       # the entry's own answers for the training records, compared in the quiz
# pattern = "{{record}}.out"      # style "files" only: the file next.sh RECORD leaves
"""

_FILES = """\
[results]
style = "files"                 # next.sh RECORD leaves one file per record
pattern = "{{record}}.mha"        # the file next.sh RECORD leaves in its working directory
submitted = "outputs/{{record}}.mha"   # the entry's own results for the training records, compared in the quiz
"""

_TEMPLATE = """\
# A small challenge written by `vmjudge challenge new` ({style}, scorer {scorer}). Every key of
# challenge.toml is here: those the sample needs are set, the others are comments showing their
# default. docs/reference/configuration.md says what each takes; `vmjudge challenge add DIR`
# refuses a bad value naming the key.
name = "{name}"

[entry]
# kind = "archive"              # or "container" (a saved container image) or "submission" (a submission.zip)
required = {required}   # what the archive must hold ("dir/" is a directory)
# max_size = 52428800           # bytes of the archive
# max_members = 10000           # files and directories in it
# max_unpacked = 1073741824     # bytes of its files unpacked
# max_scored_per_owner = 5      # scored entries per owner and board; left out: no limit

# [container]                   # kind = "container" only
# input = "/input"              # where each record's files are, read-only
# output = "/output"            # where the entry leaves its results
# command = ["/app/run"]        # what runs; left out: the image's ENTRYPOINT and CMD
# run = "per_case"              # or "whole_set"
# tmp = 2048                    # MiB of a disk of its own for each run's /tmp, empty at its start

# [submission]                  # kind = "submission" only: DrivenData's submission.zip with main.py
# code_dir = "/code_execution"  # the zip unpacked here, where main.py runs
# data = "data"                 # the record set, read-only, in code_dir
# output = "submission.csv"     # what main.py leaves in code_dir
# format = "submission_format.csv"   # in each record set: the ids, then the columns to fill
# order = "same"                # the rows in the format's order, or "any"
# command = ["python3", "main.py"]   # what runs
# steps = false                 # true: each set in steps, SET/steps/NAME/, run once each with only the past

[image]
packages = []                   # Debian packages for the guest (it has python3 already)
# pip = []                      # pip requirements, such as "numpy==1.26.4"
# components = ["main"]         # Debian archive areas; also "contrib", "non-free", "non-free-firmware"
# build = "image/build.sh"      # a script under image/, run in the new root, offline
# build_timeout = 1800          # seconds the build script may take
# gpu = "nvidia-535"            # the guest carries NVIDIA's Tesla 535 driver

[vm]
vcpus = 1                       # default 2
memory = 512                    # MiB; default 2048
home = 256                      # MiB of the entry's home disk; default 1024
# gpu = "t4"                    # or "any": every VM stage in a GPU slot (needs [image] gpu)
# cpu_level = "x86-64-v2"       # the least x86-64 level its entries may get; hosts below take none
# instance = "ml.m5.large"      # the cloud instance the VM mirrors, named in reports beside the limits

[limits]
setup = 60                      # seconds for setup.sh; default 300
per_record = 15                 # seconds for one next.sh RECORD; default 40
quiz_total = 120                # seconds for every training record; default 4100
exam_total = 120                # seconds for every test record; default 3600
# score = 900                   # seconds for an evaluation container or an isolated scorer ([score])
# output = 1048576              # bytes of each command's output kept from its start
# output_tail = 65536           # and from its end
# stage_output = 67108864       # bytes of output one stage's log keeps
# stage_results = 268435456     # bytes of result files one stage keeps (style "files")
# vm_hours = 10                 # VM hours per owner and board; left out: no budget
# submissions_per_hour = 10     # through the portal: entries accepted from one owner in an hour
# pending_per_owner = 3         # through the portal: one owner's entries waiting or running
# spool_bytes_per_owner = 1073741824   # through the portal: bytes of one owner's archives kept
# smoke_tests_per_day = 10      # through the portal: dry runs (smoke tests) one owner may send in 24 hours

{results}
[score]
scorer = "{scorer}"{scorer_note}
# undefined = "omit"            # a part that is 0/0: "omit" it from score, or count it "zero"
# invalid_answers = "refuse"    # an answer the official scorer refuses: "refuse" or "map"
# socket = "segmentation"       # with [[output]] sockets: the one the scorer reads
# isolate = true                # scorer = "scoring.py:function" (a file here), run in a VM, not in vmjudge
# The organiser's Grand Challenge evaluation image as the scorer (with [[output]] sockets), instead of scorer:
# kind = "container"            # default "host": the scorer above, in vmjudge's process
# image = "evaluation.tar.gz"   # the saved image, in this directory
# metric = "aggregates.dice"    # the score's path in its /output/metrics.json
# order = "higher"              # "higher": a higher score ranks first; "lower": a lower one
# ground_truth = "/opt/ml/input/data/ground_truth"   # where reference/ is given to it, read-only
# metrics_bytes = 1048576       # of metrics.json read at most
# home = 1024                   # MiB of the disk its changes and /output are written on
# [[score.column]]              # a further number of metrics.json on the board
# name = "dsc_agg"
# path = "aggregates.DSCagg"
# title = "Aggregated Dice"

# The challenge's page on the portal and what it offers (each download off until turned on).
# [portal]
# description = "README.md"     # Markdown shown at the top of the page (its HTML shown as text)
# training = true               # the training set as one .tar.gz with its sha256
# sample = "entries/good"       # an example entry, as an archive upload takes as it is
# replica = true                # the replica ISO, built when first asked for
# public = false                # true: downloads to anyone, not only to signed-in participants
# team_size = 3                 # the most members a team may have; 0: no teams

# [quiz]
# check = "outputs"             # with [[output]] sockets: "outputs" (each valid) or "none"; else "submitted"

# A container challenge run as Grand Challenge runs an algorithm: its sockets, one table each
# (docs: "Coming from Grand Challenge"); a record is then a directory laid out as the case's /input.
# [[input]]
# slug = "ct-image"
# kind = "image"                            # or "segmentation", "heat-map", "anything", "float", ...
# relative_path = "images/ct"               # an image's directory under images/, a value's .json file
# title = "CT Image"
# description = "The planning CT"
# required = true
# [[output]]
# slug = "segmentation"
# kind = "segmentation"
# like = "ct-image"                         # an image output: the input whose size, spacing, origin it has
# max_bytes = 1048576                       # a value output: the largest JSON taken

# A contest in phases: one [[phase]] table per phase, each with its own test set and reference.
# [[phase]]
# name = "validation"
# test = "phases/validation/test"           # the default, as is reference's
# reference = "phases/validation/reference"
# training = "phases/validation/training"   # its own training set (default: the challenge's)
# opens = 2026-06-01T00:00:00Z              # unquoted, with its offset
# closes = 2026-07-01T00:00:00Z
# carry = "sanity"                          # an earlier phase: take only entries carried from it
# entrants = "all"                          # or "promoted"
# feedback = "full"                         # or "errors", "none"
# board = "public"                          # or "hidden"
# max_scored_per_owner = 2
# max_submitted_per_owner = 10
# max_working_per_owner = 2
# [phase.limits]                            # the [limits] keys, over the challenge's
# exam_total = 600
# [phase.image]                             # the [image] keys, over the challenge's
# packages = ["python3-numpy"]
"""

SCORER_NOTES = {
    "accuracy": "             # the share of test records answered with the reference label",
    "af2017": "               # F1 per class (N, A, O, ~), as PhysioNet/CinC 2017",
    "heart2016": "            # (Se+Sp)/2 with labels 1 and -1, as PhysioNet/CinC 2016",
    "alarms2015": "           # true and false alarms (1 and 0), as PhysioNet/CinC 2015",
    "dice": "                 # mean Dice of each mask against reference/REFERENCE-RECORD.mha",
}


def challenge_toml(name: str, style: str, scorer: str, required: tuple[str, ...]) -> str:
    listed = "[" + ", ".join(f'"{r}"' for r in required) + "]"
    results = (_ANSWER_LINES if style == "answer-lines" else _FILES).format()
    return _TEMPLATE.format(name=name, style=style, scorer=scorer, required=listed, results=results,
                            scorer_note=SCORER_NOTES[scorer])
