"""The server's process without a model (hwregress.serving.server, hwregress.process_keeper): a real HTTP server from
the standard library stands in for an engine where the point is the start, the health check, the retry on a taken
port, the failure with the log's tail and the stop that leaves nothing; the engines' command lines and request
fields."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest
from support.processes import gone

from hwregress.process_group import log_tail
from hwregress.serving import server as serving


def _http_server(folder: Path, port: int, fail_first: bool = False) -> list[str]:
    """A command serving ``folder`` (with a ``health`` file: GET /health answers 200) on ``port``; with
    ``fail_first``, its first start says the port is taken and exits, as a server whose port was taken would."""
    (folder / "health").write_text("ok")
    script = textwrap.dedent(f"""
        import pathlib, sys
        marker = pathlib.Path({str(folder / "started-once")!r})
        if {fail_first!r} and not marker.exists():
            marker.write_text("1")
            print("ERROR: [Errno 98] error while attempting to bind: address already in use", flush=True)
            sys.exit(1)
        import http.server, functools
        handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory={str(folder)!r})
        http.server.ThreadingHTTPServer(("127.0.0.1", {port}), handler).serve_forever()
    """)
    return [sys.executable, "-c", script]


def test_a_server_answers_its_health_check_and_stops_with_its_keeper(tmp_path):
    started = serving.start_server(lambda port: _http_server(tmp_path, port), tmp_path / "server.log", timeout_s=30)
    assert started.alive and started.url.startswith("http://127.0.0.1:") and started.started_s > 0
    keeper = psutil.Process(started.pid).parent()
    started.stop()
    assert gone(started.pid) and gone(keeper.pid) and not started.alive
    started.stop()  # again: nothing to do


def test_a_port_taken_before_the_server_bound_it_is_retried_on_another(tmp_path):
    started = serving.start_server(lambda port: _http_server(tmp_path, port, fail_first=True), tmp_path / "server.log",
                                   timeout_s=30)
    try:
        assert started.alive and "address already in use" in started.tail()
    finally:
        started.stop()


def test_a_server_that_exits_at_once_fails_with_how_and_its_log(tmp_path):
    command = [sys.executable, "-c", "import sys; print('no such model folder: /nowhere'); sys.exit(3)"]
    with pytest.raises(serving.ServerFailed, match=r"exited before it answered its health check \(the server process "
                                                   r"ended\); .*server.log ends:\nno such model folder: /nowhere"):
        serving.start_server(lambda port: command, tmp_path / "server.log", timeout_s=30)


def test_a_server_that_never_answers_fails_at_its_timeout_and_is_ended(tmp_path):
    command = [sys.executable, "-c", "import time; print('loading', flush=True); time.sleep(600)"]
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(serving.ServerFailed, match=r"did not answer its health check within 2 s .*\nloading"):
        serving.start_server(lambda port: command, tmp_path / "server.log", timeout_s=2)
    assert {p.pid for p in psutil.Process().children(recursive=True)} - before == set()


def test_the_engines_command_lines_and_request_fields():
    folder = Path("/models/llama")
    assert serving.server_command("transformers", folder, "cuda:0", 8001, python="py") == [
        "py", "-m", "hwregress.workloads.serve_entry", "serve", "/models/llama", "--device", "cuda:0", "--host",
        "127.0.0.1", "--port", "8001", "--continuous-batching", "--log-level", "warning"]
    assert serving.server_command("transformers", folder, "cpu", 8001, kv_cache_blocks=32)[-2:] == [
        "--cb-num-blocks", "32"]  # the cache the windows need, not 60% of the machine's RAM
    assert serving.server_command("vllm", folder, "cuda:0", 8001, python="py")[:5] == [
        "py", "-m", "vllm.entrypoints.cli.main", "serve", "/models/llama"]
    assert serving.request_extras("vllm") == {"ignore_eos": True} and serving.request_extras("transformers") == {}
    for call in (lambda: serving.server_command("tgi", folder, "cpu", 1), lambda: serving.unavailable_reason("tgi")):
        with pytest.raises(ValueError, match="serving engine 'tgi': choose from"):
            call()
    assert log_tail(folder / "no.log", 5) == []


def test_the_plugin_and_its_families_load_without_the_serving_extra():
    # the README's install has no httpx, FastAPI or uvicorn: the serving family imports its client when a test runs
    code = ("import sys, hwregress.plugin, hwregress.plugin.families.registry; "
            "print(sorted(m for m in ('httpx', 'fastapi', 'uvicorn') if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert loaded.stdout.strip() == "[]", loaded.stderr
