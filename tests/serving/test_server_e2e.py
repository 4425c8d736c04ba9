"""A real ``transformers serve`` under load (hwregress.serving.server, .client, hwregress.process_keeper;
hwregress.workloads.served): a tiny Llama with random weights and the word tokenizer written here, started on a free
port, replayed open- and closed-loop, killed mid-window, failing to start, and outliving no process that owned it,
even one killed by SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import psutil
import pytest
from support.processes import gone
from support.served_shapes import TINY_LLAMA

from hwregress.serving import server as serving
from hwregress.serving.figures import Slo, window_figures
from hwregress.serving.trace import Arrivals, fixed_lengths, make_trace

UNAVAILABLE = serving.unavailable_reason("transformers")
KV_CACHE_BLOCKS = 64  # tokens for 64 requests of up to 256 each: ample, and megabytes, not 60% of the RAM
pytestmark = [pytest.mark.needs_extra, pytest.mark.slow, pytest.mark.timeout(300),
              pytest.mark.skipif(UNAVAILABLE is not None, reason=f"needs transformers serve: {UNAVAILABLE}")]

@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from hwregress.workloads.served import write_served_model

    return write_served_model("tiny_llama", tmp_path_factory.mktemp("served") / "model", seed=0, shape=TINY_LLAMA)


def _start(model, log: Path) -> serving.Server:
    return serving.start_server(lambda port: serving.server_command("transformers", model.folder, "cpu", port,
                                                                    kv_cache_blocks=KV_CACHE_BLOCKS), log,
                                env={"OMP_NUM_THREADS": "1"}, timeout_s=120)


@pytest.fixture(scope="module")
def served(tiny_model, tmp_path_factory):
    server = _start(tiny_model, tmp_path_factory.mktemp("log") / "server.log")
    yield server
    server.stop()
    assert gone(server.pid)


def _prompt(model):
    return lambda request: model.prompt_text(request.prompt_token_ids(model.vocab_size, low=3))


def test_an_open_loop_replay_sends_on_time_and_every_request_gets_the_lengths_it_asked(served, tiny_model):
    from hwregress.serving.client import replay

    trace = make_trace(11, 16, Arrivals(rate=8.0), fixed_lengths(12, 6))
    result = replay(served.url, str(tiny_model.folder), trace, _prompt(tiny_model))
    assert [t.index for t in result.timings] == list(range(16))
    for timing, asked in zip(result.timings, trace.requests, strict=True):
        assert timing.error is None, (timing.error, served.tail())
        assert (timing.prompt_tokens, timing.output_tokens, len(timing.chunk_times_s)) == (12, 6, 6)  # usage, chunks
        assert 0 <= timing.sent_s - asked.arrival_s < 0.5  # sent at its arrival, give or take the event loop
        assert 0 < timing.ttft_s <= timing.e2el_s
    assert result.duration_s >= max(t.chunk_times_s[-1] for t in result.timings)
    figures = window_figures(result.timings, result.duration_s, Slo(ttft_ms=60_000.0, tpot_ms=60_000.0))
    assert figures.completed == 16 and figures.error_rate == 0 and figures.goodput == figures.request_throughput
    assert figures.output_throughput == pytest.approx(16 * 6 / result.duration_s)


def test_a_closed_loop_keeps_at_most_its_clients_in_flight(served, tiny_model):
    from hwregress.serving.client import replay

    trace = make_trace(12, 6, Arrivals(concurrency=2), fixed_lengths(8, 4))
    result = replay(served.url, str(tiny_model.folder), trace, _prompt(tiny_model))
    assert [t.error for t in result.timings] == [None] * 6, served.tail()
    spans = [(t.sent_s, t.chunk_times_s[-1]) for t in result.timings]
    most = max(sum(1 for s, e in spans if s <= moment < e) for moment, _ in spans)
    assert most == 2  # two clients: never more in flight, and both were busy at some send


def test_a_server_holds_the_kv_cache_its_windows_need_not_most_of_the_machines_memory(served, tiny_model):
    from hwregress.serving.client import replay

    replay(served.url, str(tiny_model.folder), make_trace(14, 4, Arrivals(rate=8.0), fixed_lengths(8, 4)),
           _prompt(tiny_model))  # the first request sizes and allocates the cache
    resident = psutil.Process(served.pid).memory_info().rss
    # without --cb-num-blocks, continuous batching on a CPU takes 60% of the RAM for its cache (13 GiB on a 23-GiB VM;
    # under CI's parallel tests the kernel's OOM killer ended the server mid-test)
    assert resident < min(2 * 1024**3, 0.3 * psutil.virtual_memory().total), served.tail()


def test_a_server_killed_mid_window_fails_the_requests_it_owed_and_says_it_died(tiny_model, tmp_path):
    from hwregress.serving.client import replay

    server = _start(tiny_model, tmp_path / "server.log")
    try:
        trace = make_trace(13, 40, Arrivals(rate=10.0), fixed_lengths(8, 8))
        threading.Timer(1.5, os.kill, (server.pid, signal.SIGKILL)).start()
        result = replay(server.url, str(tiny_model.folder), trace, _prompt(tiny_model), timeout_s=20)
        failed = [t for t in result.timings if t.error]
        assert failed and len(result.timings) == 40  # none dropped
        assert window_figures(result.timings, result.duration_s, Slo()).error_rate == len(failed) / 40
        assert gone(server.pid) and not server.alive
    finally:
        server.stop()


def test_a_server_that_cannot_start_fails_with_its_log_and_leaves_no_process(tmp_path):
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(serving.ServerFailed, match=r"exited before it answered its health check .*ends:\n") as failed:
        serving.start_server(lambda port: serving.server_command("transformers", tmp_path / "no-model", "cpu", port),
                             tmp_path / "server.log", timeout_s=120)
    assert "no-model" in str(failed.value)  # the server's own words about the folder
    assert {p.pid for p in psutil.Process().children(recursive=True)} - before == set()


def test_no_server_outlives_a_process_that_started_it_and_was_killed(tiny_model, tmp_path):
    owner = textwrap.dedent(f"""
        import sys, time
        from hwregress.serving import server as serving
        started = serving.start_server(
            lambda port: serving.server_command("transformers", {str(tiny_model.folder)!r}, "cpu", port,
                                                kv_cache_blocks={KV_CACHE_BLOCKS}),
            serving.Path({str(tmp_path / "server.log")!r}), env={{"OMP_NUM_THREADS": "1"}}, timeout_s=120)
        print(started.pid, flush=True)
        time.sleep(600)
    """)
    process = subprocess.Popen([sys.executable, "-c", owner], stdout=subprocess.PIPE, text=True)
    try:
        server_pid = int(process.stdout.readline())
        assert psutil.pid_exists(server_pid)
        process.send_signal(signal.SIGKILL)
        process.wait()
        assert gone(server_pid), f"the server {server_pid} outlived its owner"
    finally:
        process.kill()


def test_the_written_model_is_its_seeds_and_its_prompts_are_exactly_their_token_ids(tiny_model, tmp_path):
    from hwregress.workloads.served import write_served_model

    again = write_served_model("tiny_llama", tmp_path / "again", seed=0, shape=TINY_LLAMA)
    other = write_served_model("tiny_llama", tmp_path / "other", seed=1, shape=TINY_LLAMA)
    weights = [(m.folder / "model.safetensors").read_bytes() for m in (tiny_model, again, other)]
    assert weights[0] == weights[1] != weights[2]
    assert json.loads((tiny_model.folder / "generation_config.json").read_text()).get("eos_token_id") is None
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model.folder)
    ids = [3, 17, 511, 200]
    assert tokenizer(tiny_model.prompt_text(ids))["input_ids"] == ids
    with pytest.raises(ValueError, match="token id 512 is not a word"):
        tiny_model.prompt_text([512])
