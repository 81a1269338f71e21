"""A challenge's sockets, Grand Challenge's way (#55), on the host: [[input]] and [[output]] read and
refused in a sentence, a record's values checked at `challenge add`, inputs.json in Grand Challenge's
shape, the channel taking an image socket's directory (its listing, then its one file) and nothing
else, and each output socket's checks naming the case and the socket."""

from __future__ import annotations

import io
import json
import math

import numpy
import pytest
import tifffile

from vmjudge.config import check_challenge_data, load_challenge
from vmjudge.errors import ChallengeError, ConfigError, InfrastructureError
from vmjudge.images.guest import frames
from vmjudge.scorers.mha import write_mha
from vmjudge.stages.sockets import case_outputs, collected, inputs_json
from vmjudge.vm.channel import Caps, CommandResult, FileResult, FrameStream

SOCKETS = """name = "gc"
[entry]
kind = "container"
[[input]]
slug = "ct-image"
kind = "image"
relative_path = "images/ct"
[[input]]
slug = "electronic-health-record"
kind = "anything"
relative_path = "ehr.json"
[[input]]
slug = "rt-dose"
kind = "image"
required = false
[[output]]
slug = "tumor-lymph-node-segmentation"
kind = "segmentation"
like = "ct-image"
[[output]]
slug = "recurrence-free-survival"
kind = "float"
relative_path = "rfs.json"
[score]
scorer = "dice"
socket = "tumor-lymph-node-segmentation"
"""
CT = write_mha((4, 3, 2), "MET_SHORT", bytes(48), (0.5, 0.5, 2.0)).replace(
    b"ElementSpacing", b"Offset = -10 -20 5\nElementSpacing")


def challenge(tmp_path, text=SOCKETS, records=("c1", "c2")):
    (tmp_path / "challenge.toml").write_text(text)
    (tmp_path / "reference").mkdir(exist_ok=True)
    for subset in ("training", "test"):
        (tmp_path / subset).mkdir(exist_ok=True)
        (tmp_path / subset / "RECORDS").write_text("".join(f"{subset[:2]}{r}\n" for r in records))
        for r in records:
            case = tmp_path / subset / f"{subset[:2]}{r}"
            (case / "images" / "ct").mkdir(parents=True, exist_ok=True)
            (case / "images" / "ct" / f"{r}-uuid.mha").write_bytes(CT)
            (case / "ehr.json").write_text('{"Age": 71, "M-stage": "M0"}')
    return tmp_path


def test_sockets_are_read_with_grand_challenges_defaults(tmp_path):
    ch = load_challenge(challenge(tmp_path))
    assert ch.sockets is not None and ch.results.style == "sockets" and ch.quiz_check == "outputs"
    dose = ch.sockets.inputs[2]
    assert (dose.relative_path, dose.required, dose.gc_kind, dose.super_kind) == ("images/rt-dose", False, "Image",
                                                                                 "Image")
    assert collected(ch.sockets) == ("images/tumor-lymph-node-segmentation/", "rfs.json")
    assert ch.score_options.socket == "tumor-lymph-node-segmentation"
    check_challenge_data(ch)


@pytest.mark.parametrize("change, said", [
    (('relative_path = "images/ct"', 'relative_path = "ct.json"'), "a directory under images/"),
    (('relative_path = "rfs.json"', 'relative_path = "images/rfs"'), "a JSON file"),
    (('relative_path = "ehr.json"', 'relative_path = "../ehr.json"'), "relative_path"),
    (('slug = "rt-dose"', 'slug = "ct-image"'), "declared twice"),
    (('like = "ct-image"', 'like = "electronic-health-record"'), "must name an image [[input]]"),
    (('kind = "float"', 'kind = "number"'), '"float"'),
    (('socket = "tumor-lymph-node-segmentation"', 'socket = "ct-image"'), "[[output]] sockets"),
    (('[score]', '[quiz]\ncheck = "submitted"\n[score]'), "needs [results] submitted"),
    (('[score]', '[results]\npattern = "{record}.mha"\n[score]'), "remove [results]"),
    (('[score]', '[container]\nrun = "whole_set"\n[score]'), "once per case"),
    (('kind = "container"', 'kind = "archive"'), "for container entries"),
])
def test_bad_sockets_are_refused_in_a_sentence(tmp_path, change, said):
    with pytest.raises(ConfigError) as err:
        load_challenge(challenge(tmp_path, SOCKETS.replace(*change)))
    assert said in str(err.value)


def test_a_score_socket_must_be_named_when_there_are_several_outputs(tmp_path):
    with pytest.raises(ConfigError, match="must name the"):
        load_challenge(challenge(tmp_path, SOCKETS.replace('socket = "tumor-lymph-node-segmentation"\n', "")))


def test_quiz_checks_other_than_submitted_need_sockets(tmp_path):
    (tmp_path / "challenge.toml").write_text('name = "x"\n[entry]\nkind = "container"\n[quiz]\ncheck = "none"\n')
    with pytest.raises(ConfigError, match="for a challenge with"):
        load_challenge(tmp_path)


@pytest.mark.parametrize("spoil, said", [
    (lambda case: (case / "images" / "ct" / "c1-uuid.mha").unlink(), "does not supply input socket ct-image"),
    (lambda case: (case / "images" / "ct" / "second.mha").write_bytes(CT), "does not supply input socket ct-image"),
    (lambda case: (case / "images" / "ct" / "c1-uuid.mha").rename(case / "images" / "ct" / "c1.nii"),
     "not a .mha or .tif"),
    (lambda case: (case / "ehr.json").write_text("{not json"), "is not a JSON value"),
    (lambda case: (case / "ehr.json").write_text(" " * (2 << 20)), "over 1048576 bytes"),
])
def test_challenge_add_checks_each_records_values(tmp_path, spoil, said):
    ch = load_challenge(challenge(tmp_path))
    spoil(tmp_path / "test" / "tec1")
    with pytest.raises(ConfigError) as err:
        check_challenge_data(ch)
    assert said in str(err.value)


def test_inputs_json_is_grand_challenges_list_of_socket_values(tmp_path):
    ch = load_challenge(challenge(tmp_path))
    values = json.loads(inputs_json(ch, "training", "trc1"))
    assert [v["interface"]["slug"] for v in values] == ["ct-image", "electronic-health-record"]  # rt-dose absent
    ct, ehr = values
    assert set(ct) == {"interface", "value", "file", "image", "pk"}
    assert set(ct["interface"]) == {"title", "description", "slug", "kind", "pk", "default_value", "super_kind",
                                    "relative_path", "overlay_segments", "look_up_table"}
    assert (ct["interface"]["kind"], ct["interface"]["super_kind"], ct["interface"]["relative_path"]) == \
        ("Image", "Image", "images/ct")
    assert ct["image"]["name"] == "c1-uuid.mha" and ct["value"] is None
    assert (ehr["interface"]["kind"], ehr["interface"]["super_kind"], ehr["value"], ehr["image"]) == \
        ("Anything", "Value", {"Age": 71, "M-stage": "M0"}, None)
    assert inputs_json(ch, "training", "trc1") == inputs_json(ch, "training", "trc1")  # the same each run
    assert values[0]["image"]["pk"] != json.loads(inputs_json(ch, "training", "trc2"))[0]["image"]["pk"]


def stream_of(*items):
    out = frames.encode("hello", 0, json.dumps({"nonce": "n", "agent": "1", "protocol": frames.PROTOCOL}).encode())
    for seq, (kind, payload) in enumerate(items, start=1):
        out += frames.encode(kind, seq, json.dumps(payload).encode() if isinstance(payload, dict) else payload)
    return out


def sent(*files):
    """A command's frames: each (name, size, data) as the agent sends a file."""
    items = [("start", {"index": 0, "name": "c"})]
    for name, size, data in files:
        items += [("file", {"name": name, "size": size, "kept": len(data)}), ("fdata", data)]
    return stream_of(*items, ("end", {"index": 0, "status": "ok", "exit_code": 0, "seconds": 1, "output_bytes": 0}))


CAPS = (Caps(100, 0, 1000, ("images/seg/", "rfs.json")),)


def test_the_channel_takes_a_directorys_listing_and_its_one_file():
    fs = FrameStream("n", limits=CAPS)
    fs.feed(sent(("images/seg/", 1, b"out.mha"), ("images/seg/out.mha", 3, b"abc"), ("rfs.json", 2, b"12")))
    files = fs.transcript.commands[0].files
    assert files["images/seg/out.mha"].data == b"abc" and files["images/seg/"].size == 1


@pytest.mark.parametrize("frames_sent", [
    [("images/seg/out.mha", 3, b"abc")],  # no listing first
    [("images/seg/", 2, b"a.mha\nb.mha"), ("images/seg/a.mha", 3, b"abc")],  # two files: none may follow
    [("images/seg/", 1, b"out.mha"), ("images/seg/other.mha", 3, b"abc")],  # not the one listed
    [("images/seg/", 1, b"out.mha"), ("images/seg/out.mha", 3, b"abc"), ("images/seg/out.mha", 3, b"abc")],
    [("images/other/", 1, b"out.mha")],  # a directory not collected
])
def test_the_channel_refuses_files_not_asked_for(frames_sent):
    with pytest.raises(InfrastructureError):
        FrameStream("n", limits=CAPS).feed(sent(*frames_sent))


def result(*files):
    cmd = CommandResult(index=0, name="c", status="ok")
    for name, size, data in files:
        cmd.files[name] = FileResult(name, size, data)
    return cmd


SEG = "images/tumor-lymph-node-segmentation/"
MASK = CT.replace(b"MET_SHORT", b"MET_UCHAR")[:-48] + bytes(24)


@pytest.mark.parametrize("files, said", [
    ([(SEG, 1, b"output.mha"), (SEG + "output.mha", len(MASK), MASK), ("rfs.json", 5, b"-0.25")], None),
    ([(SEG, None, b""), ("rfs.json", 5, b"-0.25")], "/output/images/tumor-lymph-node-segmentation is not a directory"),
    ([(SEG, 0, b""), ("rfs.json", 5, b"-0.25")], "is empty"),
    ([(SEG, 2, b"a.mha\nb.mha"), ("rfs.json", 5, b"-0.25")], "holds 2 files (a.mha, b.mha), not exactly one image"),
    ([(SEG, 1, b"mask.nii"), (SEG + "mask.nii", 3, b"abc"), ("rfs.json", 1, b"1")], "mask.nii is not a .mha or .tif"),
    ([(SEG, 1, b"o.mha"), (SEG + "o.mha", 9, b"not an image\n"), ("rfs.json", 1, b"1")], "not a MetaImage"),
    ([(SEG, 1, b"o.mha"), (SEG + "o.mha", 99, MASK.replace(b"DimSize = 4 3 2", b"DimSize = 4 3 1")[:-12]),
      ("rfs.json", 1, b"1")], "has size 4 3 1 where input socket ct-image has size 4 3 2"),
    ([(SEG, 1, b"o.mha"), (SEG + "o.mha", 99, MASK.replace(b"Offset = -10 -20 5", b"Offset = 0 0 0")),
      ("rfs.json", 1, b"1")], "has origin 0 0 0 where input socket ct-image has origin -10 -20 5"),
    ([(SEG, 1, b"o.mha"), (SEG + "o.mha", len(MASK) - 1, MASK[:-1]), ("rfs.json", 1, b"1")], "not a MetaImage"),
    # A size int() reads and float() cannot (an attacker's header): the case's problem, never the channel's
    ([(SEG, 1, b"o.mha"), (SEG + "o.mha", 99, MASK.replace(b"DimSize = 4 3 2", b"DimSize = 1" + b"0" * 400 + b" 3 2")),
      ("rfs.json", 1, b"1")], "does not describe a volume"),
    ([(SEG, 1, b"o.mha"), (SEG + "o.mha", 99, MASK.replace(b"Offset = -10 -20 5",
                                                            b"Offset = 1" + b"0" * 400 + b" 0 0")),
      ("rfs.json", 1, b"1")], "not a MetaImage"),
    ([(SEG, 1, b"output.mha"), (SEG + "output.mha", len(MASK), MASK), ("rfs.json", 402, b"1" + b"0" * 400 + b".5")],
     "not a Float"),
    ([(SEG, 1, b"o.mha"), (SEG + "o.mha", len(MASK) + 5, MASK), ("rfs.json", 1, b"1")], "over the"),
    ([(SEG, 1, b"output.mha"), (SEG + "output.mha", len(MASK), MASK)], "no file /output/rfs.json"),
    ([(SEG, 1, b"output.mha"), (SEG + "output.mha", len(MASK), MASK), ("rfs.json", 4, b"true")], "not a Float"),
    ([(SEG, 1, b"output.mha"), (SEG + "output.mha", len(MASK), MASK), ("rfs.json", 3, b"NaN")], "not a Float"),
    ([(SEG, 1, b"output.mha"), (SEG + "output.mha", len(MASK), MASK), ("rfs.json", 2, b"[1")], "is not JSON"),
])
def test_each_output_socket_is_checked_and_named(tmp_path, files, said):
    ch = load_challenge(challenge(tmp_path))
    found = case_outputs(ch, "training", "trc1", result(*files))
    if said is None:
        assert found.problems == () and found.values["tumor-lymph-node-segmentation"] == MASK
        assert found.values["recurrence-free-survival"] == b"-0.25"
        return
    assert len(found.problems) == 1 and found.problems[0].startswith("case trc1, output socket ")
    assert said in found.problems[0], found.problems


def tiff(shape=(3, 4), compression=None, **tags) -> bytes:
    out = io.BytesIO()
    tifffile.imwrite(out, numpy.arange(math.prod(shape), dtype=numpy.uint16).reshape(shape),
                     compression=compression, **tags)
    return out.getvalue()


CM = {"resolution": (20, 20), "resolutionunit": "CENTIMETER"}  # 0.5 mm a pixel, as the CT's x and y


@pytest.mark.parametrize("like, data, said", [
    ("none", tiff(**CM), None),
    ("none", tiff(resolution=(25.4, 50.8), resolutionunit="INCH"), None),
    ("none", tiff(), "is not a TIFF the judge can read: its resolution unit (1) is not inches (2) or centimetres"),
    ("none", b"II*\0" + bytes(12), "is not a TIFF the judge can read: it holds no image"),
    ("none", b"MM\0*garbage", "is not a TIFF the judge can read: it ends before offset"),
    ("none", b"PK\3\4", "is not a TIFF the judge can read: it does not begin as a TIFF file"),
    ("3-D", tiff(**CM), "o.tif has size 4 3 where input socket ct-image has size 4 3 2"),
    ("2-D", tiff(**CM), None),
    ("2-D", tiff((30, 40), **CM), "o.tif has size 40 30 where input socket ct-image has size 4 3"),
    ("2-D", tiff(resolution=(10, 10), resolutionunit="CENTIMETER"),
     "o.tif has spacing 1 1 where input socket ct-image has spacing 0.5 0.5"),
])
def test_a_tif_output_is_held_to_grand_challenges_importer_and_the_inputs_grid(tmp_path, like, data, said):
    """A .tif in an image socket: what panimg (Grand Challenge's importer) demands of it, then, when
    the socket is `like` an input, the input's size and spacing."""
    text = SOCKETS.replace('like = "ct-image"\n', "") if like == "none" else SOCKETS
    ch = load_challenge(challenge(tmp_path, text))
    if like == "2-D":
        (tmp_path / "training" / "trc1" / "images" / "ct" / "c1-uuid.mha").write_bytes(
            write_mha((4, 3), "MET_SHORT", bytes(24), (0.5, 0.5)))
    found = case_outputs(ch, "training", "trc1",
                         result((SEG, 1, b"o.tif"), (SEG + "o.tif", len(data), data), ("rfs.json", 1, b"1")))
    if said is None:
        assert found.problems == () and found.values["tumor-lymph-node-segmentation"] == data
    else:
        assert len(found.problems) == 1 and said in found.problems[0], found.problems


def test_an_input_image_the_judge_cannot_read_is_the_challenges_fault_not_the_entrys(tmp_path):
    ch = load_challenge(challenge(tmp_path))
    (tmp_path / "training" / "trc1" / "images" / "ct" / "c1-uuid.mha").write_bytes(b"not a MetaImage")
    with pytest.raises(ChallengeError, match="input socket ct-image's .*c1-uuid.mha cannot be read for its grid"):
        case_outputs(ch, "training", "trc1", result((SEG, 1, b"o.mha"), (SEG + "o.mha", len(MASK), MASK),
                                                    ("rfs.json", 1, b"1")))
