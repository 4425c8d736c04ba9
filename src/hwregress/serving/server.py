"""A served model's server process: started on a free port of 127.0.0.1 under a keeper
(:mod:`hwregress.process_keeper`, which ends the server's process group when this process is done with it or dies),
health-checked until it answers, watched, and stopped with nothing left behind.

The engines: ``transformers serve`` (OpenAI-compatible, continuous batching; CPU and GPU) and ``vllm serve`` where
vLLM is installed. Both take a model folder (:mod:`hwregress.workloads.served`) and answer ``GET /health`` once the
model is loaded.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hwregress import process_keeper as keeper
from hwregress.process_group import exit_status, log_tail

if TYPE_CHECKING:
    from hwregress.serving.settings import ServingSettings

ENGINES = ("transformers", "vllm")
START_TIMEOUT_S = 300.0  # a model's load (and a GPU engine's warm-up) before the server must answer
HEALTH_POLL_S = 0.25
PORT_ATTEMPTS = 3  # a free port can be taken between our probe and the server's bind
TAIL_LINES = 20
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}  # a server never downloads


class ServerFailed(RuntimeError):
    """The server did not start, or died; the message says how, with the last lines of its log."""


def unavailable_reason(engine: str) -> str | None:
    """Why ``engine`` cannot serve here (a missing package, with the install command), None where it can.

    Raises:
        ValueError: ``engine`` is not one of :data:`ENGINES`.
    """
    if engine == "transformers":
        missing = [name for name in ("transformers", "fastapi", "uvicorn", "openai", "httpx")
                   if importlib.util.find_spec(name) is None]
        return (f"transformers serve needs {', '.join(missing)}: pip install 'hwregress[serving]'" if missing
                else None)
    if engine == "vllm":
        missing = [name for name in ("vllm", "httpx") if importlib.util.find_spec(name) is None]
        return f"vllm serve needs {', '.join(missing)}: pip install vllm httpx" if missing else None
    raise ValueError(f"serving engine {engine!r}: choose from {ENGINES}")


def server_command(engine: str, model_folder: Path, device: str, port: int, python: str = sys.executable,
                   kv_cache_blocks: int | None = None) -> list[str]:
    """The command line that serves ``model_folder`` on ``device`` at 127.0.0.1:``port``, with ``python`` (the
    transformers engine's interpreter) and, for the transformers engine, a KV cache of ``kv_cache_blocks`` blocks
    (:meth:`hwregress.serving.settings.ServingSettings.kv_cache_blocks`; None: as much as its memory rule takes).

    Raises:
        ValueError: ``engine`` is not one of :data:`ENGINES`.
    """
    if engine == "transformers":
        # transformers' own CLI, behind the torchvision shim (hwregress.workloads.serve_entry)
        return [python, "-m", "hwregress.workloads.serve_entry", "serve", str(model_folder), "--device", device,
                "--host", "127.0.0.1", "--port", str(port), "--continuous-batching", "--log-level", "warning",
                *(["--cb-num-blocks", str(kv_cache_blocks)] if kv_cache_blocks else [])]
    if engine == "vllm":
        return [python, "-m", "vllm.entrypoints.cli.main", "serve", str(model_folder), "--host", "127.0.0.1",
                "--port", str(port)]  # vllm/entrypoints/cli/main.py: `vllm serve` as a module
    raise ValueError(f"serving engine {engine!r}: choose from {ENGINES}")


def start_served(settings: ServingSettings, model_folder: Path, device: str, log: Path,
                 python: str = sys.executable, env: dict[str, str] | None = None) -> Server:
    """Start ``settings.engine``'s server of ``model_folder`` on ``device`` (``python``: the transformers engine's
    interpreter; ``env``: settings on top of this process's), with the KV cache the settings' windows need
    (:meth:`hwregress.serving.settings.ServingSettings.kv_cache_blocks`) and their start timeout.

    Raises:
        ServerFailed: see :func:`start_server`.
    """
    return start_server(lambda port: server_command(settings.engine, model_folder, device, port, python=python,
                                                    kv_cache_blocks=settings.kv_cache_blocks(device)),
                        log, env=env, timeout_s=settings.start_timeout_s, engine=settings.engine)


def request_extras(engine: str) -> dict[str, Any]:
    """Fields every request to ``engine`` adds: vLLM stops at the tokenizer's end token unless told to ignore it
    (``ignore_eos``, as ``vllm bench serve --ignore-eos``), so that every output is the length its trace asked;
    ``transformers serve`` follows the model's generation config, which has no end token
    (:mod:`hwregress.workloads.served`)."""
    return {"ignore_eos": True} if engine == "vllm" else {}


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class Server:
    """One running server and its keeper.

    Attributes:
        engine: ``transformers`` or ``vllm``.
        url: ``http://127.0.0.1:<port>``.
        pid: the server process's (the leader of its process group).
        log: the server's standard output and error.
        started_s: how long it took to answer its health check, s.
    """

    engine: str
    url: str
    pid: int
    log: Path
    started_s: float
    _keeper: subprocess.Popen[bytes] = field(repr=False)

    @property
    def alive(self) -> bool:
        """Whether the server still runs (its keeper exits as soon as it does not)."""
        return self._keeper.poll() is None

    def tail(self, lines: int = TAIL_LINES) -> str:
        """The last ``lines`` lines of the server's log that are not blank."""
        return _tail(self.log, lines)

    def stop(self) -> None:
        """End the server's process group (through the keeper) and the keeper; idempotent."""
        keeper.stop(self._keeper)


def start_server(command_for_port: Callable[[int], list[str]], log: Path, env: dict[str, str] | None = None,
                 timeout_s: float = START_TIMEOUT_S, engine: str = "transformers") -> Server:
    """Start the server that ``command_for_port(port)`` runs, and wait until ``GET /health`` answers 200.

    Args:
        command_for_port: the server's command line for a port (:func:`server_command` with the rest bound).
        log: where its output goes (appended).
        env: variables added to this process's environment (with :data:`OFFLINE` under them).
        timeout_s: how long the server may take to answer.

    Raises:
        ServerFailed: it exited before answering, or did not answer within ``timeout_s``; the message names the
            command's first words, how it ended and the log's last lines.
    """
    for attempt in range(PORT_ATTEMPTS):
        port = free_port()
        offset = log.stat().st_size if log.exists() else 0
        process, pid = _start_keeper(command_for_port(port), log, {**os.environ, **OFFLINE, **(env or {})})
        started = time.monotonic()
        try:
            _wait_healthy(process, f"http://127.0.0.1:{port}", log, timeout_s)
        except ServerFailed:
            keeper.stop(process)
            if attempt + 1 < PORT_ATTEMPTS and _port_taken(log, offset):
                continue
            raise
        return Server(engine, f"http://127.0.0.1:{port}", pid, log, time.monotonic() - started, process)
    raise AssertionError("unreachable: the last attempt raises or returns")


def _start_keeper(command: Sequence[str], log: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], int]:
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        process = subprocess.Popen([sys.executable, "-m", keeper.__name__, str(log), "--", *command],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True, env=env)
    except OSError as error:
        raise ServerFailed(f"the server's keeper could not start: {error}") from error
    line = process.stdout.readline().decode(errors="replace").strip() if process.stdout else ""
    if not line.startswith("started "):
        keeper.stop(process)
        raise ServerFailed(f"{' '.join(command[:4])} ... could not start ({line or 'no word from its keeper'}); "
                           f"{log} ends:\n{_tail(log)}")
    return process, int(line.split()[1])


def _wait_healthy(process: subprocess.Popen[bytes], url: str, log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServerFailed(f"the server at {url} exited before it answered its health check "
                               f"({_server_ended(process)}); {log} ends:\n{_tail(log)}")
        with contextlib.suppress(OSError, urllib.error.URLError):
            with urllib.request.urlopen(f"{url}/health", timeout=2.0) as answer:
                if answer.status == 200:
                    return
        time.sleep(HEALTH_POLL_S)
    raise ServerFailed(f"the server at {url} did not answer its health check within {timeout_s:.0f} s (a model too "
                       f"big for the device, or a load slower than that); {log} ends:\n"
                       f"{_tail(log)}")


def _server_ended(process: subprocess.Popen[bytes]) -> str:
    if process.returncode == keeper.CHILD_EXITED:
        return "the server process ended"
    return f"its keeper ended: {exit_status(process.returncode)}"


def _tail(log: Path, lines: int = TAIL_LINES) -> str:
    return "\n".join(log_tail(log, lines))


def _port_taken(log: Path, offset: int) -> bool:
    try:
        with open(log, "rb") as handle:
            handle.seek(offset)
            text = handle.read().decode(errors="replace").lower()
    except OSError:
        return False
    return "address already in use" in text
