"""The frame format and the host's frame stream, fed byte streams directly."""

from __future__ import annotations

import json
import os

import pytest

from vmjudge.errors import InfrastructureError
from vmjudge.images.guest import frames
from vmjudge.supervisor.channel import FrameStream


def stream_of(*items, start=0):
    out, seq = b"", start
    for kind, payload in items:
        if isinstance(payload, dict):
            payload = json.dumps(payload).encode()
        out += frames.encode(kind, seq, payload)
        seq += 1
    return out


def hello(nonce="n1"):
    return ("hello", {"nonce": nonce, "agent": "1.0", "protocol": 1})


def test_binary_payloads_round_trip_in_any_split():
    payload = os.urandom(70000) + b"\nVMJ1 out 0 0 00000000\n"
    data = stream_of(hello(), ("start", {"index": 0, "name": "c"}), ("out", payload),
                     ("end", {"index": 0, "status": "ok", "exit_code": 0, "seconds": 1, "output_bytes": len(payload)}),
                     ("bye", {"commands": 1}))
    for step in (1, 7, 4096, len(data)):
        fs = FrameStream("n1")
        for i in range(0, len(data), step):
            fs.feed(data[i:i + step])
        assert fs.transcript.finished
        assert bytes(fs.transcript.commands[0].output) == payload


def test_bad_crc_is_refused():
    data = bytearray(stream_of(hello(), ("log", b"hello there")))
    data[-3] ^= 0x01
    with pytest.raises(InfrastructureError, match="failed its CRC check") as err:
        FrameStream("n1").feed(bytes(data))
    assert err.value.reason == "channel-broken"


def test_damaged_header_field_is_caught_by_the_crc():
    good = frames.encode("log", 1, b"abc")
    bad = good.replace(b"log", b"out", 1)
    with pytest.raises(InfrastructureError, match="CRC"):
        FrameStream("n1").feed(stream_of(hello()) + bad)


def test_sequence_gap_is_refused():
    data = stream_of(hello()) + frames.encode("log", 2, b"skipped one")
    with pytest.raises(InfrastructureError, match="expected frame 1, got 2"):
        FrameStream("n1").feed(data)


def test_wrong_nonce_is_refused():
    with pytest.raises(InfrastructureError, match="nonce 'other'"):
        FrameStream("n1").feed(stream_of(hello("other")))


def test_first_frame_must_be_hello():
    with pytest.raises(InfrastructureError, match="not hello"):
        FrameStream("n1").feed(stream_of(("log", b"x")))


@pytest.mark.parametrize("garbage", [b"garbage that is not a frame\n", b"\x00" * 100, b"VMJ1 out x 3 0\n",
                                     b"VMJ1 out 0 99999999 00000000\n", b"VMJ1 nope 0 0 00000000\n"])
def test_garbage_is_refused_at_once(garbage):
    with pytest.raises(InfrastructureError, match="channel broke"):
        FrameStream("n1").feed(garbage)


def test_oversized_frame_is_refused_before_its_payload_arrives():
    header = b"VMJ1 out 0 %d 00000000\n" % (frames.MAX_PAYLOAD + 1)
    with pytest.raises(InfrastructureError, match="more than the limit"):
        FrameStream("n1").feed(header)


def test_partial_frame_waits_for_more():
    data = stream_of(hello())
    fs = FrameStream("n1")
    assert fs.feed(data[:-5]) == 0
    assert fs.decoder.in_frame()
    assert fs.feed(data[-5:]) == 1


def test_frames_out_of_place_are_refused():
    with pytest.raises(InfrastructureError, match="no command running"):
        FrameStream("n1").feed(stream_of(hello(), ("out", b"x")))
    with pytest.raises(InfrastructureError, match="after the last frame"):
        FrameStream("n1").feed(stream_of(hello(), ("bye", {"commands": 0}), ("log", b"late")))
    with pytest.raises(InfrastructureError, match="malformed"):
        FrameStream("n1").feed(stream_of(hello(), ("start", {"name": "no index"})))


def test_agent_that_could_not_read_its_job_reports_why():
    fs = FrameStream("n1")
    fs.feed(stream_of(("hello", {"nonce": None}), ("error", {"message": "job.json is not valid JSON"}),
                      ("bye", {"commands": 0})))
    assert fs.transcript.agent_error == "job.json is not valid JSON"
    assert fs.transcript.finished


def command_frames(out_chunks, file_chunks=(), index=0):
    items = [("start", {"index": index, "name": "c"})] + [("out", c) for c in out_chunks]
    if file_chunks:
        items.append(("file", {"name": "r.qrs", "size": sum(map(len, file_chunks)), "kept": 0}))
        items += [("fdata", c) for c in file_chunks]
    items.append(("end", {"index": index, "status": "ok", "exit_code": 0, "seconds": 1,
                          "output_bytes": sum(map(len, out_chunks)), "truncated": False}))
    return items


def test_host_keeps_only_the_allowance_whatever_the_guest_sends():
    """A guest that ignores its output limit (a wedged or subverted agent) cannot grow host memory."""
    fs = FrameStream("n1", limits=((1000, 500),))
    fs.feed(stream_of(hello(), *command_frames([b"x" * 700] * 10, [b"y" * 400] * 5)))
    cmd = fs.transcript.commands[0]
    assert len(cmd.output) == 1000 and cmd.truncated and cmd.host_capped
    assert len(cmd.files["r.qrs"].data) == 500 and cmd.files["r.qrs"].truncated


def test_commands_must_come_in_the_jobs_order():
    with pytest.raises(InfrastructureError, match="not the job's next command"):
        FrameStream("n1", limits=((10, 10),)).feed(stream_of(hello(), *command_frames([b"a"], index=1)))
    two = command_frames([b"a"]) + command_frames([b"b"], index=1)
    with pytest.raises(InfrastructureError, match="not the job's next command"):
        FrameStream("n1", limits=((10, 10),)).feed(stream_of(hello(), *two))


def test_raw_frames_only_when_the_job_asked():
    with pytest.raises(InfrastructureError, match="raw frame the job did not ask for"):
        FrameStream("n1").feed(stream_of(hello(), ("raw", b"data")))
    fs = FrameStream("n1", allow_raw=True)
    fs.feed(stream_of(hello(), ("raw", b"data")))
    assert bytes(fs.transcript.raw) == b"data"


def test_agent_logs_are_capped():
    fs = FrameStream("n1")
    fs.feed(stream_of(hello(), *[("log", b"z" * 10000)] * 300))
    assert len(fs.transcript.logs) == 256 and all(len(line) == 4096 for line in fs.transcript.logs)
