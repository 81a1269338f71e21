"""A submission challenge on the host (#60): [entry] kind = "submission" and [submission] read and
refused as every table is; its records the ids of its submission format; what `submit` refuses
before anything is stored; the job the guest is given; stage 3's rows kept and read back; and the
built-in scorer of DrivenData's Youth Mental Health Narratives against a computation of its own."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from vmjudge.archive.checks import check_archive
from vmjudge.config import Site, check_challenge_data, load_challenge
from vmjudge.config.submission import SubmissionRules
from vmjudge.errors import ConfigError, EntryError
from vmjudge.queue.admit import admit
from vmjudge.queue.db import Queue
from vmjudge.queue.results import decode, encode
from vmjudge.scorers.builtin import youth_mental_health
from vmjudge.stages.data_sets import challenge_sets
from vmjudge.vm.job import CodeDir, Command, Job

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "drivendata-style"


def write(tmp_path, text, formats=True):
    (tmp_path / "challenge.toml").write_text('name = "x"\n[entry]\nkind = "submission"\n' + text)
    for subset, ids in (("training", ("s1", "s2")), ("test", ("t1", "t2", "t3"))) if formats else ():
        (tmp_path / subset).mkdir(exist_ok=True)
        (tmp_path / subset / "submission_format.csv").write_text("id,p\n" + "".join(f"{i},0.5\n" for i in ids))
    return tmp_path


def test_the_kind_has_drivendatas_layout_and_its_records_are_the_formats_ids(tmp_path):
    ch = load_challenge(write(tmp_path, ""))
    assert ch.submission == SubmissionRules()
    assert (ch.submission.code_dir, ch.submission.data_dir, ch.submission.output, ch.submission.order) == \
        ("/code_execution", "/code_execution/data", "submission.csv", "same")
    assert (ch.training, ch.test) == (("s1", "s2"), ("t1", "t2", "t3"))
    assert (ch.results.style, ch.quiz_check, ch.entry.required) == ("table", "outputs", ())
    assert (ch.entry.max_size, ch.entry.max_unpacked) == (1 << 30, 4 << 30)
    assert ch.submission.argv({"main.py", "main.sh"}) == ("python3", "main.py")
    assert ch.submission.argv({"main.sh"}) == ("sh", "main.sh")


@pytest.mark.parametrize(("text", "said"), [
    ('[submission]\ncode_dir = "/etc/code"\n', "code_dir"),
    ('[submission]\ncode_dir = "relative"\n', "code_dir"),
    ('[submission]\ndata = "../data"\n', "data"),
    ('[submission]\noutput = "data"\n', "output and data are both 'data'"),
    ('[submission]\norder = "sorted"\n', "order"),
    ('[submission]\ncommand = []\n', "command"),
    ('[submission]\nspeed = 1\n', "speed"),
    ('[results]\nstyle = "files"\n', "remove \\[results\\]"),
    ('[quiz]\ncheck = "none"\n', "remove \\[quiz\\]"),
    ('required = ["main.py"]\n', "required is for archive entries"),
])
def test_each_bad_value_is_refused_with_what_is_allowed(tmp_path, text, said):
    if text.startswith("required"):
        (tmp_path / "challenge.toml").write_text(f'name = "x"\n[entry]\nkind = "submission"\n{text}')
    else:
        write(tmp_path, text)
    with pytest.raises(ConfigError, match=said):
        load_challenge(tmp_path)


def test_submission_is_refused_for_another_kind(tmp_path):
    (tmp_path / "challenge.toml").write_text('name = "x"\n[submission]\norder = "any"\n')
    with pytest.raises(ConfigError, match="for submission entries only"):
        load_challenge(tmp_path)


def test_an_id_that_cannot_be_a_records_name_is_refused(tmp_path):
    write(tmp_path, "")
    (tmp_path / "test" / "submission_format.csv").write_text("id,p\nok,1\n../x,1\n")
    with pytest.raises(ConfigError, match="has the id '../x'"):
        load_challenge(tmp_path)


def test_challenge_add_wants_each_sets_format_and_no_answer_beside_it(tmp_path):
    shutil.copytree(EXAMPLE, tmp_path / "c")  # with entries/: [portal] sample names one
    check_challenge_data(load_challenge(tmp_path / "c"))
    shutil.copy(tmp_path / "c" / "reference" / "test_labels.csv", tmp_path / "c" / "test" / "test_labels.csv")
    with pytest.raises(ConfigError, match="test/test_labels.csv has the name of a reference answer"):
        check_challenge_data(load_challenge(tmp_path / "c"))
    (tmp_path / "c" / "test" / "test_labels.csv").unlink()
    (tmp_path / "c" / "training" / "submission_format.csv").unlink()
    with pytest.raises(ConfigError, match="training/RECORDS is missing|submission_format.csv is missing"):
        check_challenge_data(load_challenge(tmp_path / "c"))


def test_a_sets_data_disk_holds_its_whole_directory(tmp_path):
    ch = load_challenge(EXAMPLE)
    sets = dict(challenge_sets(ch))
    assert set(sets) == {"training", "test"}
    assert set(sets["test"]) == {"test_features.csv", "submission_format.csv"}
    assert sets["test"]["test_features.csv"] == EXAMPLE / "test" / "test_features.csv"


def zip_of(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def test_submit_refuses_a_zip_without_main_at_its_top_and_another_name(tmp_path):
    ch = load_challenge(EXAMPLE)
    folder = zip_of(tmp_path / "submission.zip", {"submission_src/main.py": b"print(1)\n"})
    with pytest.raises(EntryError, match=r"^Your files are inside the folder submission_src/: make the archive from "
                                         r"inside it \(cd submission_src && zip -r ../submission.zip .\)") as caught:
        check_archive(ch, ch.name, folder)
    assert caught.value.reason == "missing-component"
    with pytest.raises(EntryError, match="holds no main.py or main.sh at its top") as caught:
        check_archive(ch, ch.name, zip_of(tmp_path / "x-submission.zip", {"model.bin": b""}))
    for refused, reason in (({"main.py": b"", "data/x.csv": b""}, "bad-archive"),
                            ({"main.py": b"", "submission.csv": b""}, "bad-archive"),
                            ({"main.sh": b"echo\r\n"}, "bad-script")):
        with pytest.raises(EntryError) as caught:
            check_archive(ch, ch.name, zip_of(tmp_path / "y-submission.zip", refused))
        assert caught.value.reason == reason
    assert check_archive(ch, ch.name, zip_of(tmp_path / "team-submission.zip", {"main.py": b""})) == ["main.py"]
    assert check_archive(ch, ch.name, zip_of(tmp_path / "s.zip", {"main.sh": b"", "model.bin": b""}))
    with pytest.raises(EntryError, match="upload the zip file"):
        check_archive(ch, ch.name, zip_of(tmp_path / "entry.tar.gz", {"main.py": b""}))


def test_the_guest_is_told_the_code_directory_and_each_command_runs_there():
    job = Job(commands=(Command("python3 main.py", ("python3", "main.py"), 60),), media={}, data=("test",),
              code=CodeDir("/code_execution", "data", "test"))
    doc = json.loads(job.job_json("n"))
    assert doc["code"] == {"path": "/code_execution", "data": "data", "from": "test"}
    assert [c["cwd"] for c in doc["commands"]] == ["/code_execution"]
    for bad in (("/proc/x", "data", "test"), ("/c", "../d", "test"), ("/c", "data", "a/b"), ("c", "data", "t")):
        with pytest.raises(ValueError):
            CodeDir(*bad)
    with pytest.raises(ValueError, match="entry's commands in the guest's own root"):
        Job(commands=(Command("x", ("x",), 1, user="root"),), code=CodeDir("/c", "data", "test"))


def test_stage_3s_rows_are_kept_and_read_back_by_id():
    rows = {"t1": {"p": "0.5", "q": "x"}, "t2": {"p": "1", "q": "y"}}
    data = encode(("t1", "t2"), {"t1": "ok", "t2": "ok"}, "table", rows=rows)
    assert data == encode(("t1", "t2"), {"t2": "ok", "t1": "ok"}, "table", rows=dict(reversed(rows.items())))
    back = decode(data)
    assert (back.records, back.rows, back.answers, back.files) == (("t1", "t2"), rows, None, None)


def test_the_youth_mental_health_scorer_is_drivendatas_average_f1(tmp_path):
    with open(EXAMPLE / "reference" / "test_labels.csv", newline="") as f:
        labels = {r.pop("uid"): r for r in csv.DictReader(f)}
    ids = tuple(labels)
    # Every binary variable right but the first, which is predicted 1 everywhere; the categorical ones right on
    # the first half of the rows only.
    columns = list(next(iter(labels.values())))
    first = columns[0]
    rows = {u: {c: (("1" if c == first else labels[u][c]) if c not in youth_mental_health.CATEGORICAL else
                    (labels[u][c] if n < len(ids) // 2 else "99")) for c in columns} for n, u in enumerate(ids)}
    positives = sum(1 for u in ids if labels[u][first] == "1")
    first_f1 = 2 * positives / (2 * positives + (len(ids) - positives))
    binary = (first_f1 + 20 * 1.0) / 21
    expected = (21 * binary + 0.5 + 0.5) / 23
    got = youth_mental_health.score(decode(encode(ids, dict.fromkeys(ids, "ok"), "table", rows=rows)),
                                    EXAMPLE / "reference")
    assert got == pytest.approx({"binary_f1": binary, "InjuryLocationType_f1": 0.5, "WeaponType1_f1": 0.5,
                                 "score": expected})


def test_a_smoke_test_is_a_dry_run_asked_for_at_upload_with_its_own_limit_per_day(tmp_path):
    """DrivenData's smoke tests: `submit --smoke` (the portal's box) makes any submission a dry run, which
    never scores; through the portal, [limits] smoke_tests_per_day bounds them per owner, apart from the
    entry limit, which they never use."""
    challenge = tmp_path / "c"
    shutil.copytree(EXAMPLE, challenge, ignore=shutil.ignore_patterns("entries"))
    toml = challenge / "challenge.toml"
    toml.write_text(toml.read_text().replace("[limits]\n", "[limits]\nsmoke_tests_per_day = 2\n")
                    .replace('kind = "submission"', 'kind = "submission"\nmax_scored_per_owner = 1'))
    ch = load_challenge(challenge)
    site = Site(home=tmp_path / "home")
    site.home.mkdir()
    queue = Queue(site.layout.queue_db)
    queue.add_challenge(ch.name, challenge, "key")
    archive = zip_of(tmp_path / "submission.zip", {"main.py": b"print(1)\n"})

    def send(smoke: bool):
        return admit(site, queue, ch.name, ch, archive, "alice", False, rate_limited=True, smoke=smoke)

    assert [send(True).dry_run for _ in range(2)] == [True, True]
    with pytest.raises(EntryError, match="has sent 2 smoke tests .* in the last 24 hours") as caught:
        send(True)
    assert caught.value.reason == "smoke-limit"
    assert send(False).dry_run is False  # an entry to be scored: its own limit, which the smoke tests left alone
    assert [e.dry_run for e in queue.entries()] == [True, True, False]
    assert admit(site, queue, ch.name, ch, archive, "organiser", False, smoke=True).dry_run  # `submit`: no limit


def test_generate_reproduces_the_committed_data(tmp_path):
    subprocess.run([sys.executable, str(EXAMPLE / "generate.py"), "--out", str(tmp_path)], check=True)
    made = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert made == sorted(Path(s, n) for s in ("public", "reference", "test", "training")
                          for n in os.listdir(EXAMPLE / s))
    for rel in made:
        assert (tmp_path / rel).read_bytes() == (EXAMPLE / rel).read_bytes(), rel
