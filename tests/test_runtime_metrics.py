"""Runtime metrics per case (#55): each entry command's CPU and memory sampled over time in the guest
(images/guest/samples.py, as pure logic here), bounded by the host's channel whatever the guest sends
(vm/samples.py), let through to participants for the quiz's training cases only (never the exam's, never
while a phase keeps its figures back), and drawn on the portal's report page as small SVG charts beside
their limits. No VM: the real guest's series is checked in tests/test_gc_runtime.py."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

import pytest

from vmjudge.config import load_challenge
from vmjudge.errors import ConfigError
from vmjudge.images import build
from vmjudge.images.guest.samples import LIMIT, Series
from vmjudge.reports import participant
from vmjudge.reports.figures import participant_lines, participant_view
from vmjudge.reports.report import report_page, show
from vmjudge.stages.figures import gpu_memory
from vmjudge.vm import channel
from vmjudge.vm.channel import FrameStream, Transcript
from vmjudge.vm.reading import JobRun
from vmjudge.vm.samples import MAX_SAMPLES, read_samples
from vmjudge.web import report_view
from vmjudge.web.usage_chart import MAX_CHARTS, usage_charts

from .html_tree import parse
from .test_figures import EXAM, MIB, PREP, QUIZ
from .test_frames import stream_of
from .test_web_pages import stage
from .web_home import WebHome, sign_in

# The guest's sampler


def test_a_long_case_keeps_at_most_120_samples_evenly_spaced_and_its_end():
    for seconds in (0.2, 3.0, 59.0, 61.0, 600.0, 3600.0):
        clock = [0.0]
        series = Series(lambda clock=clock: (clock[0] * 0.5, 1000.0 + clock[0]))
        while clock[0] < seconds:  # watch()'s loop: woken when the next sample is due, a little after
            series.tick(clock[0])
            clock[0] += min(series.wait(clock[0]), 2.0) + 0.001
        clock[0] = seconds
        series.end(seconds)
        taken = series.rows()
        assert 2 <= len(taken) <= LIMIT, seconds
        assert taken[0][0] == 0.0 and taken[-1] == [seconds, seconds * 0.5, 1000.0 + seconds]
        grid = [t for t, _, _ in taken[:-1]]
        gaps = {round(b - a, 1) for a, b in zip(grid, grid[1:], strict=False)}
        assert gaps <= {series.interval}, (seconds, gaps)  # evenly spaced, at the interval now in force
        if series.interval > 0.5:  # halved only when full: at least half of what it may keep is left
            assert len(taken) >= LIMIT // 2, seconds
    assert series.interval == 32.0  # an hour: 0.5 s doubled six times


def test_a_busy_loop_leaves_slots_empty_never_two_in_one_and_a_failed_reading_does_not_spin():
    series = Series(lambda: (1.0, 2.0))
    for t in (0.0, 0.1, 0.2, 1.7, 1.8, 1.9, 2.0):  # 0.5, 1.0 and 1.5 missed; then each slot once
        series.tick(t)
    assert [t for t, _, _ in series.rows()] == [0.0, 1.7, 2.0]
    failing = Series(lambda: None)
    failing.tick(0.0)
    assert failing.wait(0.0) == 0.5 and failing.rows() == []  # its slot empty, the next one due later
    failing.end(0.3)
    assert failing.rows() == [] and failing.wait(0.4) == float("inf")
    done = Series(lambda: (0.25, 7))
    done.end(0.4)
    done.tick(1.0)  # nothing after the end
    assert done.rows() == [[0.4, 0.25, 7]]


WATCH = """
import json, os, pwd, subprocess, sys, time
sys.path.insert(0, sys.argv[1])
import command, samples

class Channel:  # what watch() sends on: nothing to send it to here
    last_sent = time.monotonic()
    def send(self, kind, data=b""): self.last_sent = time.monotonic()

class Cmd:
    heartbeat, timeout = 30.0, 30.0  # no tick would wake the loop before its samples are due

read_fd, write_fd = os.pipe()
started = time.monotonic()
proc = subprocess.Popen(["sleep", "1.6"], stdout=write_fd, start_new_session=True)
os.close(write_fd)
series = samples.Series(lambda: (time.monotonic() - started, 7))
command.watch(Channel(), Cmd(), proc, {read_fd: ("out", command.OutputCap(4096, 0))}, started,
              pwd.getpwuid(os.getuid()), False, series)
print(json.dumps(series.rows()))
"""


def test_the_command_loop_wakes_for_each_sample_and_the_end():
    """The guest's watch() with a real process (no cgroup: the reading is the clock): its select
    wakes for samples due every 0.5 s, though no heartbeat is due for 30 s, and once at the exit."""
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", WATCH, str(build.GUEST_DIR)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    taken = json.loads(proc.stdout)
    assert [m for _, _, m in taken] == [7] * len(taken) and 4 <= len(taken) <= 5, taken
    for k, (t, reading, _) in enumerate(taken[:4]):
        assert 0.5 * k <= t + 0.001 < 0.5 * k + 0.3 and abs(reading - t) < 0.05, taken  # due, and taken at once
    assert 1.6 <= taken[-1][0] < 2.5, taken  # the end's, as the command exited


# The host's channel


def ended(usage) -> FrameStream:
    fs = FrameStream("n1")
    fs.feed(stream_of(("hello", {"nonce": "n1", "protocol": 1}), ("start", {"index": 0, "name": "a"}),
                      ("end", {"index": 0, "status": "ok", "exit_code": 0, "seconds": 1.0, "usage": usage})))
    return fs


@pytest.mark.parametrize("given, kept", [
    ([[0, 0, 10], [0.5, 0.4, 20], [1.0, 0.9, 30]], ((0, 0, 10), (0.5, 0.4, 20), (1.0, 0.9, 30))),
    ([[0, 0, 10], [float("nan"), 1, 1], [0.5, -1, 5], [0.6, True, 5], [0.7, "1", 5], [0.8, 0.1, 1 << 70],
      [0.9, 0.2, None], [1, 2], [1, 2, 3, 4, 5], [0.95, 0.3, 4, -1], {"t": 1}, "x", [1.0, 0.5, 40]],
     ((0, 0, 10), (1.0, 0.5, 40))),
    # A GPU stage's: the card's memory fourth, in samples that may lack it where NVML did not answer.
    ([[0, 0, 10, 5], [0.5, 0.4, 20], [1.0, 0.9, 30, 1 << 33]],
     ((0, 0, 10, 5), (0.5, 0.4, 20), (1.0, 0.9, 30, 1 << 33))),
    ([[1, 1, 1], [1, 2, 2], [0.5, 3, 3], [2, 0.5, 4], [3, 4, 5]], ((1, 1, 1), (3, 4, 5))),  # time on, CPU never back
    ([[i, i, i] for i in range(1000)], tuple((i, i, i) for i in range(MAX_SAMPLES))),
    ([], None), ([["a", "b", "c"]], None), ({"0": [0, 0, 0]}, None), ("many", None), (None, None),
])
def test_the_channel_keeps_sane_samples_only_and_never_fails_the_run_for_them(given, kept):
    fs = ended({"cpu_seconds": 1.0, "peak_memory": 5, "samples": given})
    (cmd,) = fs.transcript.commands
    assert cmd.status == "ok" and cmd.samples == kept
    assert cmd.usage is not None and cmd.usage["cpu_seconds"] == 1.0 and "samples" not in cmd.usage


def test_a_runs_commands_keep_samples_within_its_budget(monkeypatch):
    monkeypatch.setattr(channel, "RUN_SAMPLES", 250)
    fs = FrameStream("n1")
    items: list = [("hello", {"nonce": "n1", "protocol": 1})]
    for i in range(4):
        items += [("start", {"index": i, "name": f"c{i}"}),
                  ("end", {"index": i, "status": "ok", "exit_code": 0,
                           "usage": {"samples": [[t, t, t] for t in range(200)]}})]
    fs.feed(stream_of(*items))
    assert [len(c.samples or ()) for c in fs.transcript.commands] == [120, 120, 10, 0]
    assert read_samples({"samples": [[0, 0, 0]]}, room=0) is None


# What participants see

SAMPLES = [[0.0, 0.0, 1 * MIB], [0.5, 0.4, 150 * MIB], [1.0, 0.9, 300 * MIB], [1.5, 1.3, 90 * MIB]]
SECRET = 987_654_321  # an exam record's memory, in a sample: it must reach no participant
SAMPLED_QUIZ = {**QUIZ, "instance": "ml.m5.large",
                "commands": [{**r, "samples": [[t, c, m + i] for t, c, m in SAMPLES]}
                             for i, r in enumerate(QUIZ["commands"])]}
SAMPLED_PREP = {**PREP, "instance": "ml.m5.large",
                "commands": [{**PREP["commands"][0], "samples": [[0.0, 0.0, 1.0], [0.5, 0.5, 123_456_789.0]]}]}
SAMPLED_EXAM = {**EXAM, "instance": "ml.m5.large",
                "commands": [{**r, "samples": [[0.0, 0.0, 1.0], [0.5, 0.25, SECRET]]} for r in EXAM["commands"]]}


def test_the_quiz_gives_each_training_cases_samples_and_the_exam_and_setup_none():
    quiz = participant_view("quiz", SAMPLED_QUIZ)
    assert [r["samples"][1] for r in quiz["records"]] == [[0.5, 0.4, 150 * MIB + i] for i in range(7)]
    assert (quiz["vcpus"], quiz["instance"]) == (2, "ml.m5.large")
    assert "samples" not in participant_view("prep", SAMPLED_PREP) and "123456789" not in \
        json.dumps(participant_view("prep", SAMPLED_PREP))
    assert str(SECRET) not in json.dumps(participant_view("exam", SAMPLED_EXAM))
    resources, slowest = participant_lines("quiz", SAMPLED_QUIZ)  # on the Resources line, which comparisons leave out
    assert resources.endswith("; 7 of 7 training cases sampled over time, the busiest a106 using 0.87 of 2 vCPU(s) "
                              "on average; the VM mirrors ml.m5.large.") and slowest.startswith("Slowest records: ")
    assert participant_lines("prep", SAMPLED_PREP)[0].endswith("used; the VM mirrors ml.m5.large.")
    # Whatever a caller puts in the exam's view, its allow-list lets no record through.
    exam = {**participant_view("exam", SAMPLED_EXAM), "records": [{"record": "b201", "samples": [[0, 0, SECRET]]}]}
    assert participant.allowed({"figures": {"exam": exam}}, participant.ENTRY) == {
        "figures": {"exam": participant_view("exam", SAMPLED_EXAM)}}


def sampled_entry(queue, tmp_path) -> int:
    from .test_queue_hosts import add
    eid = add(queue, tmp_path)
    counts = {"records": 2, "completed": 2, "failed": 0, "timed_out": 0}
    for name, figs, nxt in (("prep", SAMPLED_PREP, "quiz"), ("quiz", SAMPLED_QUIZ, "exam"),
                            ("exam", SAMPLED_EXAM, "score")):
        stage(queue, eid, name, "passed", f"{name} ok", nxt, figures=figs, exam=counts if name == "exam" else None)
    stage(queue, eid, "score", "scored", "score 0.5", outcome="scored", scores={"score": 0.5})
    with queue.database.transaction() as db:
        db.execute("UPDATE entries SET published = ? WHERE id = ?", (time.time() - 1, eid))
    return eid


def test_every_participant_document_has_the_quiz_samples_and_nothing_of_the_exams(queue_location, tmp_path):
    from .test_queue_hosts import hosts
    (queue,) = hosts(queue_location, tmp_path, "h")
    eid = sampled_entry(queue, tmp_path)
    doc = show(None, queue, eid)
    assert [len(r["samples"]) for r in doc["figures"]["quiz"]["records"]] == [4] * 7
    page = report_page(queue, eid)
    assert page["figures"] == doc["figures"]
    for text in (json.dumps(doc), json.dumps(page), doc["report"]):
        assert str(SECRET) not in text and "123456789" not in text
    kept = queue.stage_runs(eid)[2].figures  # the organiser's (show --organiser), whole
    assert kept["commands"][0]["samples"][1][2] == SECRET


@pytest.mark.parametrize("feedback", [participant.ERRORS, participant.NONE])
def test_a_phase_keeping_its_figures_back_keeps_the_samples_back(queue_location, tmp_path, feedback):
    from .test_queue_hosts import hosts
    (queue,) = hosts(queue_location, tmp_path, "h")
    eid = sampled_entry(queue, tmp_path)
    seen = participant.Seen.at(queue.entry(eid), queue.stage_runs(eid), queue.scorings(eid), time.time(), feedback)
    page = participant.report_page(seen)
    assert page["figures"] == {} and "samples" not in json.dumps(page) and "over time" not in page["report"]
    assert all(not s.charts for s in report_view.steps(page))
    full = participant.report_page(participant.Seen.at(queue.entry(eid), queue.stage_runs(eid), queue.scorings(eid),
                                                       time.time()))
    assert sum(len(s.charts) for s in report_view.steps(full)) == 7


# The report page's charts

SVG = "{http://www.w3.org/2000/svg}"


def charts_of(text: str) -> list[ET.Element]:
    found = re.findall(r'<figure class="chart usage"[^>]*>\s*(<svg.*?</svg>)', text, re.S)
    return [ET.fromstring(svg) for svg in found]


def signed_in_with_an_entry(tmp_path):
    """A portal with alice signed in and an entry of hers, its stages to be recorded by the test."""
    web = WebHome(tmp_path)
    client = web.client()
    web.token = web.owners.add("alice")
    assert sign_in(client, web.token).status_code == 303
    return web, client, web.queue.add_entry("big", "alice", False, "a" * 64, "e.tar.gz", web.tar("e.tar.gz"))


def test_the_report_page_draws_each_training_case_beside_its_limits(tmp_path):
    web, client, eid = signed_in_with_an_entry(tmp_path)
    counts = {"records": 2, "completed": 2, "failed": 0, "timed_out": 0}
    quiz = {**SAMPLED_QUIZ, "commands": [{**SAMPLED_QUIZ["commands"][0], "name": 'x<script>"\u202e'},
                                         *SAMPLED_QUIZ["commands"][1:]]}
    for name, figs, nxt in (("prep", SAMPLED_PREP, "quiz"), ("quiz", quiz, "exam"), ("exam", SAMPLED_EXAM, "score")):
        stage(web.queue, eid, name, "passed", f"{name} ok", nxt, figures=figs, exam=counts if name == "exam" else None)
    answer = client.get(f"/entries/{eid}")
    assert answer.status_code == 200
    page = parse(answer.text)
    drawn = charts_of(answer.text)
    assert len(drawn) == 7 and len(page.one("li", id="step-quiz").all("figure", cls="chart")) == 7
    assert not page.one("li", id="step-exam").all("figure") and str(SECRET) not in answer.text
    assert "<script>" not in answer.text and "x&lt;script&gt;&#34;\\u202e" in answer.text
    first = drawn[0]
    memory, cpu = first.findall(f"{SVG}g")
    assert memory.find(f"{SVG}line[@class='limit']/{SVG}title").text == "limit 1.8 GiB"
    assert cpu.find(f"{SVG}line[@class='limit']/{SVG}title").text == "2 vCPUs"
    assert len(memory.find(f"{SVG}polyline").attrib["points"].split()) == 4
    assert len(cpu.find(f"{SVG}polyline").attrib["points"].split()) == 6  # a step for each of the 3 spans
    assert "The VM mirrors ml.m5.large." in answer.text
    # Each chart on one line marked data-training, as the bars and records are (test_noninterference.py leaves
    # such lines out: they vary with the machine's noise).
    drawn_lines = [line for line in answer.text.splitlines() if "<svg" in line or "polyline" in line]
    assert len(drawn_lines) == 7 and all("data-training" in line for line in drawn_lines)


def test_a_hostile_document_draws_a_bounded_page():
    many = [[i * 0.5, i * 0.1, i * 1000] for i in range(10_000)]
    view = {"memory_limit": 100, "vcpus": True,
            "records": [{"record": f"r{i}", "samples": many} for i in range(1000)]
            + [{"record": "odd", "samples": [["1", None, float("nan")], [-1, 0, 0], 7]}, {"record": "s", "samples": 9}]}
    charts, sampled = usage_charts(view)
    assert (len(charts), sampled) == (MAX_CHARTS, 1002)
    for c in charts:
        assert all(len(p.line.split()) <= 2 * MAX_SAMPLES for p in c.panels)
        assert c.panels[1].limit_y is None  # vcpus = true is no number of vCPUs
    assert usage_charts({"records": [{"record": "odd", "samples": [["1", None, 0], [-1, 0, 0]]}]}) == ([], 1)


# [vm] instance


def test_the_instance_a_challenge_mirrors_is_a_name_checked_when_read(tmp_path):
    (tmp_path / "challenge.toml").write_text('name = "x"\n[vm]\ninstance = "ml.g4dn.xlarge"\n')
    assert load_challenge(tmp_path).vm.instance == "ml.g4dn.xlarge"
    (tmp_path / "challenge.toml").write_text('name = "x"\n')
    assert load_challenge(tmp_path).vm.instance is None
    for bad in ("m5 large", "<b>", "a" * 65, ".m5", "m5\\n"):
        (tmp_path / "challenge.toml").write_text(f'name = "x"\n[vm]\ninstance = "{bad}"\n')
        with pytest.raises(ConfigError, match=r"\[vm\] instance = .* is not allowed: use letters, digits"):
            load_challenge(tmp_path)


# GPU memory (a GPU stage; the guest's NVML reading is tests/test_gpu_memory.py)

T4_MIB = 15360
GPU_QUIZ = {**QUIZ, "gpu_memory": T4_MIB * MIB,
            "commands": [{**QUIZ["commands"][0], "samples": [[0.0, 0.0, 1 * MIB, 300 * MIB], [0.5, 0.4, 150 * MIB],
                                                             [1.0, 0.9, 300 * MIB, 9000 * MIB]]}]}


def test_a_gpu_stage_keeps_the_cards_memory_from_the_hello_as_the_gpu_lines_limit():
    card = {"state": "ok", "name": "Tesla T4", "memory_mib": T4_MIB, "driver": "535.216.03", "line": "x"}
    for hello, kept in (({"gpu": card}, T4_MIB * MIB), ({"gpu": {**card, "state": "failed"}}, None),
                        ({"gpu": {**card, "memory_mib": -1}}, None), ({"gpu": "T4"}, None), ({}, None), (None, None)):
        run = JobRun("vmj-test", Transcript("n1", hello=hello), "0" * 64, boot_seconds=1.0, total_seconds=2.0,
                     ended="bye")
        assert gpu_memory(run) == kept, hello
    assert participant_view("quiz", GPU_QUIZ)["gpu_memory"] == T4_MIB * MIB
    assert participant.allowed({"figures": {"quiz": participant_view("quiz", GPU_QUIZ)}}, participant.ENTRY)[
        "figures"]["quiz"]["records"][0]["samples"][2] == [1.0, 0.9, 300 * MIB, 9000 * MIB]


def test_a_gpu_stages_chart_draws_the_cards_memory_beside_the_card_where_it_was_read():
    (chart,), sampled = usage_charts(participant_view("quiz", GPU_QUIZ))
    assert sampled == 1 and [p.title for p in chart.panels] == ["Memory", "CPU", "GPU memory"]
    memory, _, card = chart.panels
    assert len(memory.line.split()) == 3 and len(card.line.split()) == 2  # the sample NVML missed: no GPU point
    assert card.limit_words == "limit 15.0 GiB" and card.top > chart.panels[1].bottom
    assert chart.height > card.bottom and chart.what == "memory, CPU and GPU memory"
    assert "GPU memory up to 8.8 GiB of 15.0 GiB" in chart.summary
    plain = usage_charts(participant_view("quiz", SAMPLED_QUIZ))[0][0]
    assert len(plain.panels) == 2 and plain.height < chart.height and "GPU" not in plain.summary


def test_the_report_page_draws_a_gpu_stages_third_panel(tmp_path):
    web, client, eid = signed_in_with_an_entry(tmp_path)
    stage(web.queue, eid, "prep", "passed", "prep ok", "quiz", figures=PREP)
    stage(web.queue, eid, "quiz", "passed", "quiz ok", "exam", figures=GPU_QUIZ)
    answer = client.get(f"/entries/{eid}")
    assert answer.status_code == 200
    (svg,) = charts_of(answer.text)
    panels = svg.findall(f"{SVG}g")
    assert [g.attrib["data-panel"] for g in panels] == ["memory", "cpu", "gpu memory"]
    assert panels[2].find(f"{SVG}line[@class='limit']/{SVG}title").text == "limit 15.0 GiB"
    assert svg.find(f"{SVG}title").text.endswith(": memory, CPU and GPU memory over time")
    height = float(svg.attrib["viewBox"].split()[3])  # room for the third panel, its axis above the time's words
    assert float(panels[2].find(f"{SVG}line[@class='axis']").attrib["y1"]) < height - 10 < height == 298
