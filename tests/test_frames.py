"""The frame format and the host's frame stream, fed byte streams directly."""

from __future__ import annotations

import json
import os

import pytest

from vmjudge.errors import InfrastructureError
from vmjudge.images.guest import frames
from vmjudge.stages.stage_log import StageLog
from vmjudge.vm.channel import Caps, FrameStream, Watch


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


def command_frames(out_chunks, file_chunks=(), index=0, tail=b"", total=None):
    items = [("start", {"index": index, "name": "c"})] + [("out", c) for c in out_chunks]
    if tail:
        items.append(("tail", tail))
    if file_chunks:
        items.append(("file", {"name": "r.qrs", "size": sum(map(len, file_chunks)), "kept": 0}))
        items += [("fdata", c) for c in file_chunks]
    shown = sum(map(len, out_chunks)) + len(tail)
    items.append(("end", {"index": index, "status": "ok", "exit_code": 0, "seconds": 1,
                          "output_bytes": shown if total is None else total, "truncated": (total or 0) > shown}))
    return items


def test_host_keeps_only_the_allowance_whatever_the_guest_sends():
    """A guest that ignores its output limit (a wedged or subverted agent) cannot grow host memory."""
    fs = FrameStream("n1", limits=(Caps(1000, 0, 500, ("r.qrs",)),))
    fs.feed(stream_of(hello(), *command_frames([b"x" * 700] * 10, [b"y" * 400] * 5)))
    cmd = fs.transcript.commands[0]
    assert len(cmd.output) == 1000 and cmd.truncated and cmd.host_capped
    assert len(cmd.files["r.qrs"].data) == 500 and cmd.files["r.qrs"].truncated


def test_commands_must_come_in_the_jobs_order():
    with pytest.raises(InfrastructureError, match="not the job's next command"):
        FrameStream("n1", limits=(Caps(10, 0, 10),)).feed(stream_of(hello(), *command_frames([b"a"], index=1)))
    two = command_frames([b"a"]) + command_frames([b"b"], index=1)
    with pytest.raises(InfrastructureError, match="not the job's next command"):
        FrameStream("n1", limits=(Caps(10, 0, 10),)).feed(stream_of(hello(), *two))


def test_raw_frames_only_when_the_job_asked():
    with pytest.raises(InfrastructureError, match="raw frame, which the job did not ask for"):
        FrameStream("n1").feed(stream_of(hello(), ("raw", b"data")))
    fs = FrameStream("n1", allow_raw=True)
    fs.feed(stream_of(hello(), ("raw", b"data")))
    assert bytes(fs.transcript.raw) == b"data"


def test_agent_logs_are_capped():
    fs = FrameStream("n1")
    fs.feed(stream_of(hello(), *[("log", b"z" * 10000)] * 300))
    assert len(fs.transcript.logs) == 256 and all(len(line) == 4096 for line in fs.transcript.logs)


def test_a_raw_frame_is_refused_at_its_header_before_its_payload_is_buffered():
    header = frames.header("raw", 1, frames.MAX_RAW_PAYLOAD, 0)
    with pytest.raises(InfrastructureError, match="raw frame, which the job did not ask for"):
        FrameStream("n1").feed(stream_of(hello()) + header)


def test_json_nested_deeper_than_the_agent_writes_is_refused_without_parsing_it():
    deep = b"[" * 100000 + b"]" * 100000  # json.loads would hit the recursion limit
    with pytest.raises(InfrastructureError, match="nested deeper"):
        FrameStream("n1").feed(stream_of(hello(), ("start", b'{"index": 0, "name": ' + deep + b"}")))
    fs = FrameStream("n1")  # brackets inside strings are text, not nesting
    fs.feed(stream_of(hello(), ("start", {"index": 0, "name": "[[[[[[[[[[ {{{{{{ \\\" [[[["})))
    assert fs.transcript.commands[0].name.startswith("[[[[")


def test_a_file_the_job_did_not_collect_is_refused():
    fs = FrameStream("n1", limits=(Caps(10, 0, 10, ("r.qrs",)),))
    items = command_frames([b"a"], [b"x"])
    items[2] = ("file", {"name": "../../etc/shadow", "size": 1, "kept": 1})
    with pytest.raises(InfrastructureError, match="did not ask for"):
        fs.feed(stream_of(hello(), *items))


def test_the_tail_is_kept_within_its_cap_and_the_omitted_middle_counted():
    fs = FrameStream("n1", limits=(Caps(100, 50, 10),))
    fs.feed(stream_of(hello(), *command_frames([b"h" * 100], tail=b"t" * 80, total=1000)))
    cmd = fs.transcript.commands[0]
    assert (bytes(cmd.output), bytes(cmd.tail)) == (b"h" * 100, b"t" * 50)
    assert cmd.host_capped and cmd.omitted == 1000 - 150


class ListLog:
    def __init__(self):
        self.events = []

    def hello(self, info):
        self.events.append(("hello", info.get("agent")))

    def started(self, cmd):
        self.events.append(("start", cmd.index))

    def output(self, cmd, data):
        self.events.append(("out", cmd.index, len(data)))

    def ended(self, cmd):
        self.events.append(("end", cmd.index, cmd.status))


def test_with_keep_all_off_only_the_last_command_keeps_its_bytes():
    log = ListLog()
    seen = []
    fs = FrameStream("n1", watch=Watch(log=log, on_end=lambda c: seen.append(
        (c.index, len(c.output), c.files["r.qrs"].data)) and False, keep_all=False))
    items = []
    for i in range(50):
        items += command_frames([b"x" * 1000], [b"y" * 10], index=i)
    fs.feed(stream_of(hello(), *items))
    commands = fs.transcript.commands
    assert [len(c.output) for c in commands] == [0] * 49 + [1000]
    assert all(c.files["r.qrs"].data == b"" for c in commands[:-1]) and commands[-1].files["r.qrs"].data == b"y" * 10
    assert seen == [(i, 1000, b"y" * 10) for i in range(50)]  # on_end saw each command whole
    # The log hears the hello first (a GPU stage's log opens with the guest's GPU), then each command.
    assert log.events[:4] == [("hello", "1.0"), ("start", 0), ("out", 0, 1000), ("end", 0, "ok")]
    assert len(log.events) == 151


def test_on_end_stops_the_run_and_no_later_frame_is_read():
    fs = FrameStream("n1", watch=Watch(on_end=lambda c: c.index == 1, keep_all=False))
    items = []
    for i in range(5):
        items += command_frames([b"x"], index=i)
    taken = fs.feed(stream_of(hello(), *items))
    assert fs.transcript.stopped and [c.index for c in fs.transcript.commands] == [0, 1]
    assert taken == 1 + 2 * 3 and bytes(fs.transcript.commands[1].output) == b"x"
    assert fs.feed(stream_of(("log", b"more"), start=taken)) == 0


def test_the_stage_log_streams_head_and_tail_and_stops_at_its_cap(tmp_path):
    path = tmp_path / "exam.log"
    with StageLog(path, cap=2500) as log:
        fs = FrameStream("n1", watch=Watch(log=log, keep_all=False))
        items = []
        for i in range(10):
            items += command_frames([b"h" * 1000], index=i, tail=b"T" * 100, total=5000)
        fs.feed(stream_of(hello(), *items))
    text = path.read_bytes()
    assert text.count(b"=== c") == 10 and text.count(b"--- c: ok (exit 0, 1.0 s, 5000 bytes of output)") == 10
    first = text.split(b"--- c: ok")[0]
    assert first == b"=== c\n" + b"h" * 1000 + b"\n[... 3900 bytes of output not kept ...]\n" + b"T" * 100 + b"\n"
    output_bytes = sum(text.count(c) for c in (b"h", b"T"))
    assert 2000 < output_bytes <= 2500 and text.count(b"its cap") == 1
    assert os.stat(path).st_mode & 0o777 == 0o600


def test_a_compromised_guest_cannot_bloat_or_break_the_host_with_end_and_log_frames():
    bad_exit = command_frames([b"a"])
    bad_exit[-1] = ("end", {"index": 0, "status": "ok", "exit_code": "x" * 100000, "output_bytes": 1})
    with pytest.raises(InfrastructureError, match="exit code that is not a number"):
        FrameStream("n1").feed(stream_of(hello(), *bad_exit))
    huge = command_frames([b"a"])
    huge[-1] = ("end", {"index": 0, "status": "ok", "exit_code": 0, "output_bytes": 1e400})
    with pytest.raises(InfrastructureError) as err:  # OverflowError, as channel-broken
        FrameStream("n1").feed(stream_of(hello(), *huge))
    assert err.value.reason == "channel-broken"
    fs = FrameStream("n1")
    fs.feed(stream_of(hello(), ("start", {"index": 0, "name": "bad\ud800name"}), *[("log", b"")] * 5000,
                      *[("tail", b"")] * 5000))
    assert fs.transcript.commands[0].name == "bad?name"  # the queue (SQLite) could not store a surrogate
    assert len(fs.transcript.timeline) <= 2 + 256
