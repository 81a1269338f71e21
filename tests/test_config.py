"""challenge.toml and site.toml: good files load, every bad value is named with what is allowed."""

from __future__ import annotations

import pytest

from vmjudge.config import ImageRecipe, WebSite, check_challenge_data, load_challenge, load_site
from vmjudge.errors import ConfigError
from vmjudge.images.build import image_key, recipe_document
from vmjudge.vm.job import Command, Job
from vmjudge.vm.reading import Limits, host_timeouts


def write(tmp_path, text, name="challenge.toml"):
    (tmp_path / name).write_text(text)
    return tmp_path


def test_full_challenge_loads(tmp_path):
    ch = load_challenge(write(tmp_path, 'name = "beats2014"\n[image]\npackages = ["python3-numpy"]\n'
                                        'pip = ["wfdb==4.3.1"]\n[vm]\nvcpus = 2\nmemory = 2048\nhome = 1024\n'))
    assert ch.name == "beats2014"
    assert ch.image.packages == ("python3-numpy",) and ch.image.pip == ("wfdb==4.3.1",)
    assert (ch.vm.vcpus, ch.vm.memory_mib, ch.vm.home_mib) == (2, 2048, 1024)


def test_vm_defaults_are_the_original_sandbox(tmp_path):
    ch = load_challenge(write(tmp_path, 'name = "x"\n'))
    assert (ch.vm.vcpus, ch.vm.memory_mib, ch.vm.home_mib) == (2, 2048, 1024)


@pytest.mark.parametrize("text, words", [
    ('name = "x"\n[vm]\nvcpus = 0\n', ["[vm] vcpus = 0", "1 to 64"]),
    ('name = "x"\n[vm]\nmemory = "lots"\n', ["[vm] memory = 'lots'", "MiB"]),
    ('name = "x"\n[vm]\nvcpus = true\n', ["[vm] vcpus = True"]),
    ('name = "x"\n[vm]\ncpus = 2\n', ["unknown key(s) cpus"]),
    ('name = "x"\n[image]\npackages = ["Bad Name"]\n', ["[image] packages", "'Bad Name'", "Debian package"]),
    ('name = "x"\n[image]\npip = ["x; rm -rf /"]\n', ["[image] pip"]),
    ('name = "has space"\n', ["name = 'has space'"]),
    ('[vm]\nvcpus = 1\n', ["has no name"]),
    ('name = "x"\n[vm\n', ["not valid TOML"]),
])
def test_bad_values_are_named(tmp_path, text, words):
    with pytest.raises(ConfigError) as err:
        load_challenge(write(tmp_path, text))
    for w in words:
        assert w in str(err.value)
    assert str(tmp_path / "challenge.toml") in str(err.value)


def test_entry_limit_is_absent_by_default_and_read_when_given(tmp_path):
    assert load_challenge(write(tmp_path, 'name = "x"\n')).entry.max_scored_per_owner is None
    ch = load_challenge(write(tmp_path, 'name = "x"\n[entry]\nmax_scored_per_owner = 5\n'))
    assert ch.entry.max_scored_per_owner == 5


@pytest.mark.parametrize("value", ["0", "-1", '"5"', "2.5", "true", "1000001"])
def test_entry_limit_must_be_a_positive_whole_number(tmp_path, value):
    with pytest.raises(ConfigError) as err:
        load_challenge(write(tmp_path, f'name = "x"\n[entry]\nmax_scored_per_owner = {value}\n'))
    message = str(err.value)
    assert message.startswith(f"{tmp_path / 'challenge.toml'}: [entry] max_scored_per_owner = ")
    assert "is not allowed: use a whole number from 1 to 1000000, or leave the key out for no limit." in message


def test_missing_challenge_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_challenge(tmp_path)


def test_site_settings_and_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("VMJUDGE_ACCEL", raising=False)
    monkeypatch.delenv("VMJUDGE_URI", raising=False)
    write(tmp_path, '[libvirt]\nuri = "qemu+ssh://judge1/system"\naccel = "tcg"\nchannel = "uart"\n', "site.toml")
    site = load_site(tmp_path)
    assert (site.uri, site.accel, site.channel) == ("qemu+ssh://judge1/system", "tcg", "uart")
    monkeypatch.setenv("VMJUDGE_ACCEL", "kvm")
    assert load_site(tmp_path).accel == "kvm"
    monkeypatch.setenv("VMJUDGE_ACCEL", "fast")
    with pytest.raises(ConfigError, match="VMJUDGE_ACCEL='fast'"):
        load_site(tmp_path)


def test_bad_site_values(tmp_path):
    write(tmp_path, '[libvirt]\naccel = "hvf"\n', "site.toml")
    with pytest.raises(ConfigError, match=r"\[libvirt\] accel = 'hvf' is not allowed: use \"kvm\" or \"tcg\""):
        load_site(tmp_path)
    write(tmp_path, '[network]\nx = 1\n', "site.toml")
    with pytest.raises(ConfigError, match=r"unknown table \[network\]"):
        load_site(tmp_path)


def challenge_dir(tmp_path, toml, training=("r1",), test=("t1",)):
    write(tmp_path, toml)
    for subset, records in (("training", training), ("test", test)):
        (tmp_path / subset).mkdir(exist_ok=True)
        (tmp_path / subset / "RECORDS").write_text("".join(r + "\n" for r in records))
        for r in records:
            (tmp_path / subset / f"{r}.hea").write_text("x")
    (tmp_path / "reference").mkdir(exist_ok=True)
    return tmp_path


def test_pipeline_sections_load_with_physionet_defaults(tmp_path):
    ch = load_challenge(challenge_dir(tmp_path, 'name = "x"\n'))
    assert (ch.limits.setup, ch.limits.per_record, ch.limits.quiz_total, ch.limits.exam_total, ch.limits.output) \
        == (300.0, 40.0, 4100.0, 3600.0, 1 << 20)
    assert ch.results.style == "answer-lines" and ch.results.submitted == "answers.txt"
    assert ch.entry.required == ("setup.sh", "next.sh") and ch.scorer == "accuracy"
    assert (ch.score_options.undefined, ch.score_options.invalid_answers) == ("omit", "refuse")
    assert (ch.training, ch.test) == (("r1",), ("t1",))
    check_challenge_data(ch)


def test_score_options_are_read(tmp_path):
    text = 'name = "x"\n[score]\nscorer = "heart2016"\nundefined = "zero"\ninvalid_answers = "map"\n'
    options = load_challenge(challenge_dir(tmp_path, text)).score_options
    assert (options.undefined, options.invalid_answers) == ("zero", "map")


def test_files_style_needs_pattern_and_submitted(tmp_path):
    text = 'name = "x"\n[results]\nstyle = "files"\npattern = "{record}.qrs"\nsubmitted = "out/{record}.qrs"\n'
    ch = load_challenge(challenge_dir(tmp_path, text))
    assert ch.results.output_name("100") == "100.qrs" and ch.results.submitted_path("100") == "out/100.qrs"
    with pytest.raises(ConfigError, match="needs pattern"):
        load_challenge(challenge_dir(tmp_path, 'name = "x"\n[results]\nstyle = "files"\n'))
    with pytest.raises(ConfigError, match="needs submitted"):
        load_challenge(challenge_dir(tmp_path, 'name = "x"\n[results]\nstyle = "files"\npattern = "{record}.q"\n'))


@pytest.mark.parametrize("text, words", [
    ('name = "x"\n[limits]\nper_record = 0\n', "[limits] per_record = 0"),
    ('name = "x"\n[limits]\nexam_total = "1h"\n', "[limits] exam_total = '1h'"),
    ('name = "x"\n[results]\nstyle = "csv"\n', "[results] style = 'csv'"),
    ('name = "x"\n[results]\nstyle = "files"\npattern = "../{record}"\n', "[results] pattern"),
    ('name = "x"\n[entry]\nrequired = ["/etc/passwd"]\n', "[entry] required"),
    ('name = "x"\n[entry]\nmax_size = -1\n', "[entry] max_size = -1"),
    ('name = "x"\n[score]\nscorer = "rm -rf"\n', "[score] scorer = 'rm -rf'"),
    ('name = "x"\n[score]\nundefined = "nan"\n', "[score] undefined = 'nan' is not allowed: use \"omit\" (leave a "
     "0/0 part out of score) or \"zero\" (count it as 0)."),
    ('name = "x"\n[score]\ninvalid_answers = "skip"\n', "[score] invalid_answers = 'skip' is not allowed: use "
     "\"refuse\" (as the official code: the quiz fails at that line) or \"map\" (the scorer's documented stand-in)."),
])
def test_bad_pipeline_values_are_named(tmp_path, text, words):
    with pytest.raises(ConfigError) as err:
        load_challenge(challenge_dir(tmp_path, text))
    assert words in str(err.value)


def test_challenge_data_must_be_complete(tmp_path):
    ch = load_challenge(challenge_dir(tmp_path, 'name = "x"\n', test=()))
    with pytest.raises(ConfigError, match="test/RECORDS is missing or empty"):
        check_challenge_data(ch)
    ch = load_challenge(challenge_dir(tmp_path, 'name = "x"\n', test=("t1",)))
    (tmp_path / "test" / "t1.hea").unlink()
    with pytest.raises(ConfigError, match="record t1 in test/RECORDS has no files"):
        check_challenge_data(ch)
    (tmp_path / "training" / "RECORDS").write_text("bad name\n")
    with pytest.raises(ConfigError, match="not a usable record name"):
        load_challenge(tmp_path)


def test_retention_is_absent_by_default_and_read_when_given(tmp_path):
    retention = load_site(tmp_path).retention
    assert (retention.entry_tree_days, retention.home_disk_days, retention.console_log_days,
            retention.media_days) == (None, None, None, None)
    write(tmp_path, '[retention]\nentry_tree_days = 7\nhome_disk_days = 30\nconsole_log_days = 0\nmedia_days = 365\n',
          "site.toml")
    retention = load_site(tmp_path).retention
    assert (retention.entry_tree_days, retention.home_disk_days, retention.console_log_days,
            retention.media_days) == (7, 30, 0, 365)


@pytest.mark.parametrize("key, value", [("home_disk_days", "-1"), ("entry_tree_days", '"7"'),
                                        ("console_log_days", "1.5"), ("media_days", "true"),
                                        ("home_disk_days", "36501")])
def test_bad_retention_values_are_refused_with_what_is_allowed(tmp_path, key, value):
    write(tmp_path, f"[retention]\n{key} = {value}\n", "site.toml")
    with pytest.raises(ConfigError) as err:
        load_site(tmp_path)
    assert str(err.value).startswith(f"{tmp_path / 'site.toml'}: [retention] {key} = ")
    assert str(err.value).endswith(" is not allowed: use a whole number of days from 0 to 36500, or leave the key "
                                   "out to keep them for ever.")


def test_unknown_retention_keys_and_tables_are_refused(tmp_path):
    write(tmp_path, "[retention]\nspool_days = 7\n", "site.toml")
    with pytest.raises(ConfigError, match=r"\[retention\] has unknown key\(s\) spool_days: remove or correct them"):
        load_site(tmp_path)
    write(tmp_path, "[retain]\nhome_disk_days = 7\n", "site.toml")
    with pytest.raises(ConfigError, match=r"unknown table \[retain\]: use \[site\], \[libvirt\], \[image\], "
                                          r"\[results\], \[slots\], \[vm\], \[retention\], \[gpu\], \[queue\], "
                                          r"\[web\], \[portal\], \[notify\] or \[storage\]\."):
        load_site(tmp_path)


def test_reference_answers_among_the_test_files_are_refused(tmp_path):
    """PhysioNet-style test/100.atr beside reference/100.atr would ride on the exam's CD into the VM."""
    ch = load_challenge(challenge_dir(tmp_path, 'name = "x"\n', test=("100", "101")))
    (tmp_path / "reference" / "100.atr").write_text("answer")
    (tmp_path / "reference" / "sub").mkdir()
    (tmp_path / "reference" / "sub" / "101.atr").write_text("answer")
    check_challenge_data(ch)  # answers under reference/ only: fine
    for record in ("100", "101"):
        (tmp_path / "test" / f"{record}.atr").write_text("answer")
    with pytest.raises(ConfigError) as err:
        check_challenge_data(ch)
    assert str(err.value) == (f"test/100.atr, test/101.atr have the name of a reference answer under "
                              f"{tmp_path / 'reference'}, and test records' files go into the VM, where entries can "
                              "read them: keep the answers under reference/ only, remove them from test/, and add "
                              "the challenge again.")
    (tmp_path / "test" / "100.atr").unlink()
    with pytest.raises(ConfigError, match=r"^test/101.atr has the name"):
        check_challenge_data(ch)


def test_site_toml_sets_the_guest_timeouts_and_the_image_sources(tmp_path):
    default = load_site(tmp_path / "default")
    assert (default.boot_timeout, default.silence_timeout) == (120.0, 60.0)
    assert recipe_document(default, ImageRecipe())["sources"] == [
        "deb http://deb.debian.org/debian bookworm main", "deb http://deb.debian.org/debian bookworm-updates main",
        "deb http://deb.debian.org/debian-security bookworm-security main"]
    write(tmp_path, '[libvirt]\nboot_timeout = 45\nsilence_timeout = 20\n[image]\nmirror = "http://mirror.example/d"\n'
                    'security_mirror = "https://sec.example/ds"\nsuite = "bookworm"\n', "site.toml")
    site = load_site(tmp_path)
    job = Job(commands=(Command("a", ("true",), 10), Command("b", ("true",), 30)))
    # A stage that sets none of its own: site.toml's; the host's deadline follows from them.
    assert host_timeouts(site, Limits(), job) == (45.0, 20.0, 45.0 + (10 + 5) + (30 + 5) + 30)
    assert host_timeouts(site, Limits(stage_cap=12), job) == (45.0, 20.0, 45.0 + 12 + 30)
    assert host_timeouts(site, Limits(boot_timeout=7, silence_timeout=8, deadline=9), job) == (7, 8, 9)
    assert recipe_document(site, ImageRecipe())["sources"] == [
        "deb http://mirror.example/d bookworm main", "deb http://mirror.example/d bookworm-updates main",
        "deb https://sec.example/ds bookworm-security main"]
    assert image_key(site, ImageRecipe()) != image_key(default, ImageRecipe())  # another mirror: another image


@pytest.mark.parametrize("text, says", [
    ("[libvirt]\nboot_timeout = 4\n", "[libvirt] boot_timeout = 4 is not allowed: use seconds from 5 to 3600."),
    ("[libvirt]\nsilence_timeout = 3601\n", "[libvirt] silence_timeout = 3601 is not allowed: use seconds from 5 "
                                            "to 3600."),
    ('[image]\nmirror = "ftp://x/debian"\n', "[image] mirror = 'ftp://x/debian' is not allowed: use a Debian mirror "
                                             "URL."),
    ('[image]\nsecurity_mirror = "deb.debian.org"\n', "[image] security_mirror = 'deb.debian.org' is not allowed: "
                                                      "use a Debian security mirror URL."),
    ('[image]\nsuite = "trixie"\n', "[image] suite = 'trixie' is not allowed: use \"bookworm\"."),
    ("[web]\nheader_timeout = 0\n", "[web] header_timeout = 0 is not allowed: use seconds from 0.5 to 300."),
    ("[web]\nbody_timeout = 3601\n", "[web] body_timeout = 3601 is not allowed: use seconds from 0.5 to 3600."),
    ("[web]\nfailed_uploads_per_hour = 0\n", "[web] failed_uploads_per_hour = 0 is not allowed: use a whole number "
                                             "from 1 to 100000."),
    ('[web]\nchecks = "2"\n', "[web] checks = '2' is not allowed: use a whole number from 1 to 64."),
    ("[web]\nworkers = 2\n", "[web] has unknown key(s) workers: remove or correct them."),
])
def test_bad_site_values_are_refused_with_what_is_allowed(tmp_path, text, says):
    write(tmp_path, text, "site.toml")
    with pytest.raises(ConfigError) as err:
        load_site(tmp_path)
    assert str(err.value) == f"{tmp_path / 'site.toml'}: {says}"


def test_image_components_and_build_script_load(tmp_path):
    (tmp_path / "image").mkdir()
    (tmp_path / "image" / "build.sh").write_text("make install\n")
    ch = load_challenge(write(tmp_path, 'name = "x"\n[image]\ncomponents = ["main", "contrib", "non-free", '
                                        '"non-free-firmware"]\nbuild = "image/build.sh"\nbuild_timeout = 600\n'))
    assert ch.image.components == ("main", "contrib", "non-free", "non-free-firmware")
    assert (ch.image.build, ch.image.build_dir, ch.image.build_script) == ("image/build.sh", tmp_path / "image",
                                                                            "build.sh")
    assert ch.image.build_timeout == 600.0
    site = load_site(tmp_path / "home")
    assert recipe_document(site, ch.image)["sources"][0] == \
        "deb http://deb.debian.org/debian bookworm main contrib non-free non-free-firmware"
    plain = load_challenge(write(tmp_path, 'name = "x"\n'))
    assert (plain.image.components, plain.image.build, plain.image.build_dir) == (("main",), None, None)
    assert "build" not in recipe_document(site, plain.image)


@pytest.mark.parametrize("text, says", [
    ('[image]\ncomponents = ["main", "universe"]\n', "[image] components has 'universe', which is not allowed: use "
                                                     "Debian archive areas among \"main\", \"contrib\""),
    ('[image]\ncomponents = ["contrib"]\n', "\"main\" among them"),
    ('[image]\ncomponents = ["main", "main"]\n', "name each area once"),
    ('[image]\nbuild = "build.sh"\n', "[image] build = 'build.sh' is not allowed: use the path of a script under the "
                                      "challenge's image/ directory"),
    ('[image]\nbuild = "image/../x.sh"\n', "[image] build = 'image/../x.sh' is not allowed"),
    ('[image]\nbuild = "image/nope.sh"\n', "[image] build = 'image/nope.sh' names no file under"),
    ('[image]\nbuild = "image/out.sh"\n', "names no file under"),  # a link out of image/
    ('[image]\nbuild = "image/build.sh"\nbuild_timeout = 0\n', "[image] build_timeout = 0 is not allowed: use a "
                                                               "number of seconds from 1 to 86400."),
    ('[image]\nbuild_timeout = 60\n', "build_timeout is set but there is no build script"),
])
def test_bad_image_build_keys_are_named(tmp_path, text, says):
    (tmp_path / "image").mkdir()
    (tmp_path / "image" / "build.sh").write_text("true\n")
    (tmp_path / "elsewhere.sh").write_text("true\n")
    (tmp_path / "image" / "out.sh").symlink_to(tmp_path / "elsewhere.sh")
    with pytest.raises(ConfigError) as err:
        load_challenge(write(tmp_path, 'name = "x"\n' + text))
    assert says in str(err.value)


def test_one_byte_under_image_changes_the_image_key(tmp_path):
    (tmp_path / "image" / "src").mkdir(parents=True)
    (tmp_path / "image" / "build.sh").write_text("make -C src install\n")
    (tmp_path / "image" / "src" / "tool.tar").write_bytes(b"\0" * 1000)
    write(tmp_path, 'name = "x"\n[image]\nbuild = "image/build.sh"\n')
    site = load_site(tmp_path / "home")
    key = image_key(site, load_challenge(tmp_path).image)
    assert key != image_key(site, ImageRecipe())
    assert image_key(site, load_challenge(tmp_path).image) == key  # unchanged: the same image, found at once
    (tmp_path / "image" / "src" / "tool.tar").write_bytes(b"\0" * 999 + b"\1")
    assert image_key(site, load_challenge(tmp_path).image) != key
    (tmp_path / "image" / "src" / "tool.tar").write_bytes(b"\0" * 1000)
    (tmp_path / "image" / "build.sh").write_text("make -C src install \n")
    assert image_key(site, load_challenge(tmp_path).image) != key


@pytest.mark.parametrize("text, says", [
    ('name = "x\\n"\n', "name = 'x\\n' is not allowed"),
    ('name = "x"\n[image]\npackages = ["python3\\n"]\n', "[image] packages has 'python3\\n', which is not allowed"),
    ('name = "x"\n[image]\nbuild = "image/build.sh\\n"\n', "[image] build = 'image/build.sh\\n' is not allowed"),
    ('name = "x"\n[score]\nscorer = "accuracy\\n"\n', "[score] scorer = 'accuracy\\n' is not allowed"),
])
def test_a_trailing_newline_is_no_part_of_a_name(tmp_path, text, says):
    """The patterns end in `$`, which re.match also finds before a final newline: values are
    matched whole, so "x\\n" is not taken for the name "x"."""
    (tmp_path / "image").mkdir()
    (tmp_path / "image" / "build.sh").write_text("true\n")
    with pytest.raises(ConfigError) as err:
        load_challenge(write(tmp_path, text))
    assert says in str(err.value)


def test_a_gpu_address_with_a_trailing_newline_is_refused(tmp_path):
    write(tmp_path, '[gpu]\ndevices = ["0000:65:00.0\\n"]\n', "site.toml")
    with pytest.raises(ConfigError, match=r"\[gpu\] devices has '0000:65:00.0\\n', which is not allowed"):
        load_site(tmp_path)


def test_gpu_keys_load_and_default_to_none(tmp_path):
    plain = load_challenge(write(tmp_path, 'name = "x"\n'))
    assert (plain.vm.gpu, plain.image.gpu) == (None, None)
    ch = load_challenge(write(tmp_path, 'name = "x"\n[image]\ngpu = "nvidia-535"\n[vm]\ngpu = "t4"\n'))
    assert (ch.vm.gpu, ch.image.gpu) == ("t4", "nvidia-535")
    anycard = load_challenge(write(tmp_path, 'name = "x"\n[image]\ngpu = "nvidia-535"\n[vm]\ngpu = "any"\n'))
    assert anycard.vm.gpu == "any"
    # A CPU VM on the GPU image is allowed (the agent reports no GPU and carries on).
    assert load_challenge(write(tmp_path, 'name = "x"\n[image]\ngpu = "nvidia-535"\n')).vm.gpu is None


@pytest.mark.parametrize("text, says", [
    ('[vm]\ngpu = "a100"\n', "[vm] gpu = 'a100' is not allowed: use \"t4\" or \"any\"."),
    ('[vm]\ngpu = "t4\\n"\n', "[vm] gpu = 't4\\n' is not allowed"),
    ('[vm]\ngpu = true\n', "[vm] gpu = True is not allowed"),
    ('[image]\ngpu = "nvidia-550"\n', "[image] gpu = 'nvidia-550' is not allowed: use \"nvidia-535\"."),
    ('[vm]\ngpu = "t4"\n', "[vm] gpu = 't4' needs a guest driver in the image: add gpu = \"nvidia-535\" to [image]."),
])
def test_bad_gpu_keys_are_named(tmp_path, text, says):
    with pytest.raises(ConfigError) as err:
        load_challenge(write(tmp_path, 'name = "x"\n' + text))
    assert says in str(err.value)


def test_the_portals_site_settings_have_defaults_and_are_read(tmp_path):
    assert load_site(tmp_path).web == WebSite(header_timeout=10.0, body_timeout=30.0, failed_uploads_per_hour=30,
                                              checks=2)
    write(tmp_path, "[web]\nheader_timeout = 2\nbody_timeout = 1.5\nfailed_uploads_per_hour = 5\nchecks = 1\n",
          "site.toml")
    assert load_site(tmp_path).web == WebSite(header_timeout=2.0, body_timeout=1.5, failed_uploads_per_hour=5,
                                              checks=1)


def test_site_profile_production_by_default_trial_by_file_or_environment(tmp_path, monkeypatch):
    """[site] profile (#33): production unless site.toml or VMJUDGE_PROFILE says trial (the suite's own,
    set in conftest.py); the environment wins, as VMJUDGE_ACCEL does."""
    monkeypatch.delenv("VMJUDGE_PROFILE", raising=False)
    site = load_site(tmp_path)
    assert (site.profile, site.allow_no_lsm) == ("production", False)
    write(tmp_path, '[site]\nprofile = "trial"\nallow_no_lsm = true\n', "site.toml")
    assert (load_site(tmp_path).profile, load_site(tmp_path).allow_no_lsm) == ("trial", True)
    monkeypatch.setenv("VMJUDGE_PROFILE", "production")
    assert load_site(tmp_path).profile == "production"
    monkeypatch.setenv("VMJUDGE_PROFILE", "lab")
    with pytest.raises(ConfigError) as err:
        load_site(tmp_path)
    assert str(err.value) == "VMJUDGE_PROFILE='lab' is not allowed: use \"production\" or \"trial\"."


@pytest.mark.parametrize("text, says", [
    ('profile = "prod"', "[site] profile = 'prod' is not allowed: use \"production\" or \"trial\"."),
    ('allow_no_lsm = "yes"', "[site] allow_no_lsm = 'yes' is not allowed: use true or false."),
    ("seccomp = false", "[site] has unknown key(s) seccomp: remove or correct them."),
])
def test_bad_site_profile_values(tmp_path, monkeypatch, text, says):
    monkeypatch.delenv("VMJUDGE_PROFILE", raising=False)
    write(tmp_path, f"[site]\n{text}\n", "site.toml")
    with pytest.raises(ConfigError) as err:
        load_site(tmp_path)
    assert str(err.value) == f"{tmp_path / 'site.toml'}: {says}"
