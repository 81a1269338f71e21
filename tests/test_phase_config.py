"""#40: challenge.toml's [[phase]] tables: a good contest loads, each phase judged on its own
test set, and every bad phase is refused in one sentence naming the file, the phase, the key
and what is allowed (no VM)."""

from __future__ import annotations

import datetime
import shutil

import pytest

from vmjudge.config import ImageRecipe, check_challenge_data, load_challenge
from vmjudge.errors import ConfigError

from .docs_page import section
from .phased import QUICK, contest_dir, contest_toml, write_training


def test_a_contest_loads_with_its_phases_in_order(tmp_path):
    directory = contest_dir(tmp_path, sanity="opens = 2025-06-01T00:00:00Z\ncloses = 2025-08-01T00:00:00+02:00",
                            test="[phase.limits]\nexam_total = 30\nvm_hours = 2")
    ch = load_challenge(directory)
    check_challenge_data(ch)
    assert [p.name for p in ch.phases] == ["sanity", "validation", "test"]
    sanity, validation, test = ch.phases
    assert (sanity.uploads, sanity.carry, sanity.entrants, sanity.feedback, sanity.board) == \
        (True, None, "all", "full", "public")
    assert sanity.opens == datetime.datetime(2025, 6, 1, tzinfo=datetime.UTC).timestamp()
    assert sanity.closes == datetime.datetime(2025, 7, 31, 22, tzinfo=datetime.UTC).timestamp()
    assert (validation.carry, validation.max_working_per_owner, validation.opens) == ("sanity", 2, None)
    assert (test.carry, test.entrants, test.feedback, test.board, test.max_submitted_per_owner) == \
        ("validation", "promoted", "errors", "hidden", 1)
    assert test.test == tuple(f"t{i}" for i in range(1, 9)) and validation.test == ("v1", "v2", "v3", "v4")
    # Limits are the challenge's unless the phase overrides them.
    assert (test.limits.exam_total, test.limits.vm_hours, test.limits.per_record) == (30.0, 2.0, ch.limits.per_record)
    assert validation.limits == ch.limits
    assert [ch.before(p) for p in ch.phases] == [None, sanity, validation]


def test_an_entry_of_a_phase_is_judged_on_its_sets_and_limits(tmp_path):
    ch = load_challenge(contest_dir(tmp_path, test="[phase.limits]\nexam_total = 30"))
    view = ch.in_phase("test")
    assert view.test == ch.phases[2].test and view.limits.exam_total == 30.0
    assert view.reference_dir == tmp_path / "contest" / "phases" / "test" / "reference"
    assert view.record_files("test", "t3") == [tmp_path / "contest" / "phases" / "test" / "test" / "t3.txt"]
    assert view.record_files("training", "r1") == [tmp_path / "contest" / "training" / "r1.txt"]
    assert ch.in_phase(None) is ch
    with pytest.raises(ConfigError, match=r"^challenge contest has no phase 'final': its phases are sanity, "
                                          r"validation, test\.$"):
        ch.in_phase("final")


def test_a_challenge_without_phases_has_none_and_refuses_a_phase():
    ch = load_challenge(QUICK)
    assert ch.phases == () and ch.phase is None and ch.in_phase(None) is ch
    assert ch.reference_dir == QUICK / "reference" and ch.set_dir("test") == QUICK / "test"
    with pytest.raises(ConfigError, match=r"^challenge hostile has no phases, so there is no phase 'test': leave "
                                          r"out --phase\.$"):
        ch.in_phase("test")


def test_the_phase_scored_limit_is_the_entry_limit_unless_it_says_otherwise(tmp_path):
    directory = contest_dir(tmp_path, validation="max_scored_per_owner = 3")
    toml = (directory / "challenge.toml").read_text().replace("[entry]\n", "[entry]\nmax_scored_per_owner = 5\n")
    (directory / "challenge.toml").write_text(toml)
    ch = load_challenge(directory)
    assert [p.max_scored_per_owner for p in ch.phases] == [5, 3, 5]
    assert ch.in_phase("validation").entry.max_scored_per_owner == 3


def refused(tmp_path, text: str) -> str:
    directory = contest_dir(tmp_path)
    (directory / "challenge.toml").write_text(text)
    with pytest.raises(ConfigError) as err:
        load_challenge(directory)
    return str(err.value)


@pytest.mark.parametrize("change, said", [
    (('name = "validation"\ncarry = "sanity"', 'name = "validation"\ncarry = "test"'),
     "[phase validation] carry = 'test' is not allowed: use the name of an earlier phase (here sanity)."),
    (('name = "sanity"\nfeedback = "full"', 'name = "sanity"\nfeedback = "full"\ncarry = "sanity"'),
     "[phase sanity] carry = 'sanity' is not allowed: use the name of an earlier phase (here none: the first "
     "phase takes uploads)."),
    (('feedback = "errors"', 'feedback = "quiet"'),
     "[phase test] feedback = 'quiet' is not allowed: use \"full\" or \"errors\" or \"none\"."),
    (('feedback = "errors"', 'feedback = "errors"\nboard = "public"'),
     "[phase test] board = \"public\" would show the scores that feedback = \"errors\" keeps back until the "
     "phase is published: leave board out, or set it to \"hidden\"."),
    (('name = "sanity"\nfeedback = "full"', 'name = "sanity"\nfeedback = "full"\nentrants = "promoted"'),
     "[phase sanity] entrants = 'promoted' is not allowed: use \"all\", or \"promoted\" on a phase after the "
     "first (owners are promoted from the board of the phase before)."),
    (('name = "test"', 'name = "validation"'),
     "two [[phase]] tables are named 'validation': give each phase a name of its own."),
    (('name = "test"', 'name = "Test Phase"'),
     "[phase 3] name = 'Test Phase' is not allowed: use lower-case letters, digits, '_' and '-', at most 32 "
     "characters."),
    (('name = "test"\n', ''), "the [[phase]] table number 3 has no name: add a line such as name = \"validation\"."),
    (('name = "sanity"\nfeedback = "full"', 'name = "sanity"\nfeedback = "full"\nopens = "2025-06-01"'),
     "[phase sanity] opens = 2025-06-01 is not allowed: use a date and time with its offset, unquoted, such as "
     "2025-08-10T23:59:00Z."),
    (('name = "sanity"\nfeedback = "full"', 'name = "sanity"\nfeedback = "full"\nopens = 2025-06-01T00:00:00'),
     "[phase sanity] opens = 2025-06-01 00:00:00 is not allowed: use a date and time with its offset"),
    (('name = "sanity"\nfeedback = "full"',
      'name = "sanity"\nfeedback = "full"\nopens = 2025-06-02T00:00:00Z\ncloses = 2025-06-01T00:00:00Z'),
     "[phase sanity] closes at 2025-06-01T00:00:00Z, not after it opens at 2025-06-02T00:00:00Z: give a closing "
     "time after the opening time."),
    (('max_submitted_per_owner = 1', 'max_submitted_per_owner = 0'),
     "[phase test] max_submitted_per_owner = 0 is not allowed: use a whole number from 1 to 1000000, or leave "
     "the key out for no limit."),
    (('max_working_per_owner = 2', 'max_working_per_owner = 2\ntest = "../elsewhere"'),
     "[phase validation] test = '../elsewhere' is not allowed: use a directory inside the challenge's, such as "
     "\"phases/test/test\"."),
    (('max_working_per_owner = 2', 'max_working_per_owner = 2\nimage = "other"'),
     "[phase validation.image] must be a table of keys."),
    (('max_working_per_owner = 2', 'max_working_per_owner = 2\nvm = "other"'),
     "[phase validation] has unknown key(s) vm: remove or correct them."),
    (('max_working_per_owner = 2', 'max_working_per_owner = 2\n[phase.limits]\nexam_total = 0'),
     "[phase validation.limits] exam_total = 0 is not allowed: use seconds from 1 to 604800."),
])
def test_every_bad_phase_is_one_sentence(tmp_path, change, said):
    text = contest_toml()
    assert change[0] in text
    message = refused(tmp_path, text.replace(change[0], change[1], 1))
    assert message.startswith(str(tmp_path / "contest" / "challenge.toml")), message
    assert said in message


def test_a_phase_table_with_one_bracket_is_refused(tmp_path):
    text = contest_toml().split("[[phase]]")[0] + '[phase]\nname = "only"\n'
    assert refused(tmp_path, text).endswith("phase must be one or more [[phase]] tables (two brackets), each with "
                                            "its name: write [[phase]] above each phase's keys.")


def test_challenge_add_checks_each_phases_sets_and_needs_no_top_level_test_set(tmp_path):
    directory = contest_dir(tmp_path)
    check_challenge_data(load_challenge(directory))  # no test/ nor reference/ at the top: fine
    (directory / "phases" / "validation" / "test" / "v3.txt").unlink()
    with pytest.raises(ConfigError, match=r"^record v3 in phases/validation/test/RECORDS has no files "
                                          r"phases/validation/test/v3\.\*: add them or remove the record\.$"):
        check_challenge_data(load_challenge(directory))
    (directory / "phases" / "validation" / "test" / "v3.txt").write_text("3\n")
    (directory / "phases" / "test" / "test" / "t1.csv").write_text("t1,1\n")
    (directory / "phases" / "test" / "reference" / "t1.csv").write_text("t1,1\n")
    with pytest.raises(ConfigError, match=r"^phases/test/test/t1\.csv has the name of a reference answer under .*"
                                          r"keep the answers under phases/test/reference/ only, remove them from "
                                          r"phases/test/test/, and add the challenge again\.$"):
        check_challenge_data(load_challenge(directory))
    (directory / "phases" / "test" / "test" / "t1.csv").unlink()
    shutil.rmtree(directory / "phases" / "sanity" / "reference")
    with pytest.raises(ConfigError, match=r"phases/sanity/reference is missing: put the reference answers"):
        check_challenge_data(load_challenge(directory))


def test_the_guides_hecktor_contest_is_a_challenge_toml_that_loads(tmp_path):
    """The authors' guide's "Contests in phases" walks through a HECKTOR-style challenge.toml: it must be one."""
    guide = section("authors.md", "Contests in phases")
    after = guide.split("**2. challenge.toml**, HECKTOR's phases", 1)[1]
    toml = after.split("```toml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "challenge.toml").write_text(toml)
    ch = load_challenge(tmp_path)
    assert (ch.name, ch.entry.kind, [p.name for p in ch.phases]) == ("hecktor", "container",
                                                                       ["sanity", "validation", "test"])
    sanity, validation, test = ch.phases
    assert (sanity.feedback, sanity.max_submitted_per_owner, sanity.uploads) == ("full", 10, True)
    assert (validation.carry, validation.max_working_per_owner, validation.board) == ("sanity", 2, "public")
    assert (test.carry, test.entrants, test.feedback, test.board, test.max_submitted_per_owner) == \
        ("validation", "promoted", "errors", "hidden", 1)
    assert (test.limits.exam_total, test.limits.per_record, test.limits.vm_hours) == (86400.0, 900.0, 20.0)
    assert test.test_dir == tmp_path / "phases" / "test" / "test"
    assert all(p.opens is not None and p.closes is not None and p.opens < p.closes for p in ch.phases)


# A phase's own training set: three records the challenge's training/ (r1, r2) does not have.
OWN = {"f1": 7, "f2": 8, "f3": 9}
SANITY_OWN = 'training = "phases/sanity/training"\n[phase.image]\npackages = ["python3-numpy"]'


def test_a_phase_may_have_its_own_training_set_and_image_and_a_carrying_phase_keeps_its_sources(tmp_path):
    directory = contest_dir(tmp_path, sanity=SANITY_OWN, test='[phase.image]\npip = ["wfdb==4.3.1"]')
    own = write_training(directory, "phases/sanity/training", OWN)
    ch = load_challenge(directory)
    check_challenge_data(ch)
    sanity, validation, test = ch.phases
    assert (sanity.training_dir, sanity.training) == (own, ("f1", "f2", "f3"))
    # A phase that carries entries has the training set and image of the phase they come from, so a
    # carried entry is quizzed on the records its archive answers, in the image it passed in.
    assert validation.training_dir == test.training_dir == own and validation.training == sanity.training
    numpy = ImageRecipe(packages=("python3-numpy",))
    assert sanity.image == validation.image == numpy
    assert test.image == ImageRecipe(packages=("python3-numpy",), pip=("wfdb==4.3.1",))  # its keys over its source's
    assert (ch.image, ch.training) == (ImageRecipe(), ("r1", "r2"))  # the challenge's own, which no phase uses
    assert ch.recipes == (numpy, test.image)  # what `challenge add` and `image build` build
    view = ch.in_phase("validation")
    assert (view.training, view.image, view.set_dir("training")) == (sanity.training, numpy, own)
    assert view.record_files("training", "f2") == [own / "f2.txt"]
    assert ch.in_phase(None).record_files("training", "r1") == [directory / "training" / "r1.txt"]
    # What differs by phase needs the phase named (the replica, an image's export).
    with pytest.raises(ConfigError, match=r"^phases sanity, validation, test have a training set or an image of "
                                          r"their own, so the replica of contest differs by phase: name the phase "
                                          r"with --phase \(sanity, validation, test\)\.$"):
        ch.shared_view(None, "the replica")
    assert ch.shared_view("test", "the replica").image == test.image


def test_phases_that_share_everything_stand_for_the_challenge(tmp_path):
    ch = load_challenge(contest_dir(tmp_path))
    assert ch.recipes == (ImageRecipe(),) and ch.shared_view(None, "the replica") is ch
    assert all(p.training_dir == ch.directory / "training" and p.training == ("r1", "r2") for p in ch.phases)
    plain = load_challenge(QUICK)
    assert plain.recipes == (plain.image,) and plain.shared_view(None, "the image") is plain


@pytest.mark.parametrize("sanity, validation, said", [
    ("", 'training = "phases/validation/training"',
     "[phase validation] training = 'phases/validation/training' is not allowed: phase validation takes entries "
     "carried from phase sanity, whose archives hold answers for the training set in training/ only; leave "
     "training out (a carried entry is quizzed on the training set of the phase it comes from), or let the phase "
     "take uploads (no carry), so that its entries come with answers for a training set of its own."),
    ('training = "../elsewhere"', "",
     "[phase sanity] training = '../elsewhere' is not allowed: use a directory inside the challenge's, such as "
     "\"phases/test/training\"."),
    ('[phase.image]\npackages = ["Not A Package"]', "",
     "[phase sanity.image] packages has 'Not A Package', which is not allowed: use Debian package names such as "
     "\"python3-numpy\"."),
    ('[phase.image]\npackagez = ["gcc"]', "", "[phase sanity.image] has unknown key(s) packagez: remove or correct "
                                              "them."),
    ('[phase.image]\nbuild = "image/none.sh"', "", "[phase sanity.image] build = 'image/none.sh' names no file "
                                                   "under "),
    ('[phase.image]\nbuild_timeout = 60', "", "[phase sanity.image] build_timeout is set but there is no build "
                                              "script: add build = \"image/build.sh\" or remove build_timeout."),
])
def test_every_bad_training_set_or_image_of_a_phase_is_one_sentence(tmp_path, sanity, validation, said):
    directory = contest_dir(tmp_path, sanity=sanity, validation=validation)
    with pytest.raises(ConfigError) as err:
        load_challenge(directory)
    assert str(err.value).startswith(f"{directory / 'challenge.toml'}: "), err.value
    assert said in str(err.value)


def test_a_carrying_phase_may_name_its_sources_training_set(tmp_path):
    directory = contest_dir(tmp_path, sanity='training = "phases/sanity/training"',
                            validation='training = "phases/sanity/training/"')
    write_training(directory, "phases/sanity/training", OWN)
    assert load_challenge(directory).phases[1].training == ("f1", "f2", "f3")


def test_challenge_add_checks_each_phases_training_set(tmp_path):
    directory = contest_dir(tmp_path, sanity=SANITY_OWN)
    own = directory / "phases" / "sanity" / "training"
    with pytest.raises(ConfigError, match=rf"^{own} is missing: put phase sanity's training set there \(its RECORDS "
                                          r"and each record's files\), or correct \[phase sanity\] training in "
                                          r"challenge\.toml\.$"):
        check_challenge_data(load_challenge(directory))
    write_training(directory, "phases/sanity/training", OWN)
    (own / "f2.txt").unlink()
    with pytest.raises(ConfigError, match=r"^record f2 in phases/sanity/training/RECORDS has no files "
                                          r"phases/sanity/training/f2\.\*: add them or remove the record\.$"):
        check_challenge_data(load_challenge(directory))
    # Its records are given to every participant: none may be a test record of the phase, or of a later one.
    write_training(directory, "phases/sanity/training", {**OWN, "s2": 2})
    with pytest.raises(ConfigError, match=r"^record s2 is in phase sanity's training set "
                                          r"\(phases/sanity/training/RECORDS\) and in phase sanity's test set "
                                          r"\(phases/sanity/test/RECORDS\): a training set goes to every participant, "
                                          r"so its records are not hidden; remove it from one of the two RECORDS "
                                          r"files\.$"):
        check_challenge_data(load_challenge(directory))
    write_training(directory, "phases/sanity/training", {**OWN, "t3": 3, "t4": 4})
    (own / "RECORDS").write_text("f1\nf2\nf3\nt3\nt4\n")
    with pytest.raises(ConfigError, match=r"^records t3 and 1 more are in phase sanity's training set .* and in phase "
                                          r"test's test set \(phases/test/test/RECORDS\): .* remove them from one"):
        check_challenge_data(load_challenge(directory))


def test_a_later_phase_may_train_on_an_earlier_phases_test_records(tmp_path):
    """A contest may release a phase's test set once the phase is over: the final phase here takes
    uploads, with a training set holding the sanity check's test records."""
    text = contest_toml(test='training = "phases/test/training"').replace(
        'carry = "validation"\nentrants = "promoted"', 'entrants = "promoted"')
    directory = contest_dir(tmp_path)
    (directory / "challenge.toml").write_text(text)
    write_training(directory, "phases/test/training", {"s1": 1, "s2": 2, "v1": 1})
    ch = load_challenge(directory)
    check_challenge_data(ch)
    assert ch.in_phase("test").training == ("s1", "s2", "v1") and ch.in_phase("validation").training == ("r1", "r2")


def test_the_guides_carry_refusal_is_the_one_given(tmp_path):
    """The refusal the authors' guide quotes for a carrying phase with a training set of its own, word for word."""
    guide = section("authors.md", "Contests in phases")
    said = guide.split("**Carried entries keep their training set.**", 1)[1].split("```\n…/challenge.toml: ", 1)[1]
    said = said.split("\n", 1)[0]
    with pytest.raises(ConfigError) as err:
        load_challenge(contest_dir(tmp_path, test='training = "phases/test/training"'))
    assert str(err.value) == f"{tmp_path / 'contest' / 'challenge.toml'}: {said}"


def test_a_contest_without_the_challenges_training_set_is_told_as_before(tmp_path):
    directory = contest_dir(tmp_path)
    shutil.rmtree(directory / "training")
    with pytest.raises(ConfigError, match=r"^.*/contest/training/RECORDS is missing or empty: list one record per "
                                          r"line\.$"):
        check_challenge_data(load_challenge(directory))
