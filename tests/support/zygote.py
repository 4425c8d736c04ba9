"""A zygote for the self-tests' pytest sessions: one process per self-test worker that has imported torch,
torchvision, transformers and SciPy once, and forks a fresh pytest session for each run that asks, as Android's
zygote forks apps and ``multiprocessing``'s forkserver forks workers.

A self-test's end-to-end session (:class:`project.HwProject`) runs ``python zygote_client.py SOCKET ARGS...``
through ``pytester.run``, so its output, exit status and timeout are pytester's as for ``runpytest_subprocess``;
the client hands its standard streams, working folder, environment and arguments to the zygote and exits as the
session did (by the same signal, where the session died of one). Each session is its own process, forked from a
process that has only imported (the GNU OpenMP runtime of torch's CPU build hangs in a child forked after it ran a
parallel region, which rules out forking the self-test process itself), with its own process group, its own
environment and ``sys.path`` as a fresh ``python -m pytest`` in that folder would have, and its interpreter's exit
handlers run at its end. What it saves is the imports: 4-6 s per session on a 2-core machine, most of the self-tests'
end-to-end time.

The zygote imports no ``hwregress`` module nor any other plugin's: pytest rewrites the asserts of an entry-point
plugin's package as it imports it, and warns of a package imported before the session. Sessions that must be a
process of their own from the start (a signal sent to the pytest process, an interpreter's own start-up) keep
``runpytest_subprocess``.

The sessions' own ``pytest -n`` workers start there too: ``selftest_gc`` points xdist's ``popen`` specs at
:meth:`Zygote.python_command` (held in the variable :data:`PYTHON_VARIABLE`), which runs ``python -u -c
CODE`` (execnet's bootstrap) as a fork, as a fresh interpreter would. Processes the plugin itself starts (A/B workers,
visits, ranks, Spark's Python workers) stay fresh interpreters: their being separate processes, each with its own
memory layout, is what they measure. The exception: the self-tests of the A/B engine's and the visits' logic
(pairing, looks, verdicts, dropped pairs, the fastest visit), which give a stack :attr:`Zygote.python`, an executable
that runs ``python -c`` code here (as ``--ab-python``, or as the session's ``sys.executable``:
:meth:`support.project.HwProject.forked_workers`); the tests of a worker's start, its death and what it leaves
behind keep fresh interpreters. A fork takes the request's ``OMP_NUM_THREADS`` into torch's thread count, as a fresh
interpreter's OpenMP would.

Run as ``python zygote.py SOCKET``: prints ``ready`` when it listens, serves until its standard input closes.
"""

from __future__ import annotations

import gc
import json
import os
import select
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import types
from pathlib import Path

CLIENT = Path(__file__).with_name("zygote_client.py")
PYTHON_VARIABLE = "HWREGRESS_SELFTEST_ZYGOTE_PYTHON"  # :meth:`Zygote.python_command`, for the sessions' xdist workers
HEADER = struct.Struct("!Q")  # the length of the request's JSON, sent with the client's three standard streams
# not xdist (its plugin keeps the sys.path it was imported under for its workers) nor any other pytest plugin's
# package (pytest rewrites their asserts as it imports them, and warns of one imported before the session)
PYTHON_FLAGS = ("-u", "-B")  # the interpreter options a forked ``python -c`` honours (execnet's popen uses both)
PRELOAD = ("numpy", "scipy.stats", "scipy.optimize", "scipy.special", "psutil", "jinja2", "filelock", "torch",
           "torch.distributed", "torch.profiler", "torch.utils.flop_counter", "sqlalchemy", "alembic.command",
           "alembic.config", "alembic.runtime.migration", "alembic.script", "ruptures", "sklearn", "cpuinfo")
OPTIONAL = ("PIL.Image", "mako.template", "pygments.lexers", "pygments.formatters")  # where installed
_TORCHVISION_SCHEMAS = None  # the nms schemas a session's torchvision needs here (see _import_torchvision)


def preload() -> None:
    """Import the heavy third-party modules a session imports, with the collector off, then freeze them out of
    its sight (as ``selftest_gc`` does in a fresh session)."""
    import importlib

    gc.disable()
    for name in PRELOAD:
        importlib.import_module(name)
    for name in OPTIONAL:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    _import_torchvision()
    _import_transformers()
    gc.freeze()
    gc.enable()


def _import_torchvision() -> None:
    """torchvision as :func:`hwregress.workloads.registry.import_torchvision` imports it (that module itself is not
    imported here: see the module doc): a CUDA build of torchvision beside torch's CPU build needs the nms schemas,
    defined here as that function defines them, so that a session finds torchvision imported (143 modules, 1-2 s of
    each session's CPU otherwise). The self-tests' own process and the sessions that start as fresh interpreters
    (``runpytest_subprocess``) still take hwregress's own path."""
    global _TORCHVISION_SCHEMAS
    try:
        import torchvision
    except RuntimeError as error:
        if "torchvision::nms does not exist" not in str(error):
            raise
        import torch

        _TORCHVISION_SCHEMAS = torch.library.Library("torchvision", "DEF")  # kept: dropped, it unregisters its ops
        _TORCHVISION_SCHEMAS.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        _TORCHVISION_SCHEMAS.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]
        import torchvision  # noqa: F401


def _import_transformers() -> None:
    try:
        import transformers

        transformers.GPT2Config, transformers.GPT2LMHeadModel, transformers.LlamaConfig  # noqa: B018 (lazy modules)
    except ImportError:  # the llm extra is optional
        pass


def serve(path: str) -> None:
    """Listen on the unix socket ``path``; fork a supervisor per connection; stop when standard input closes (the
    self-test worker that started the zygote is gone)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    print("ready", flush=True)
    while True:
        ready, _, _ = select.select([listener, sys.stdin], [], [])
        if sys.stdin in ready and not os.read(sys.stdin.fileno(), 1):  # the self-test worker is gone
            shutil.rmtree(os.path.dirname(path), ignore_errors=True)
            return
        if listener in ready:
            connection, _ = listener.accept()
            _reap()
            if os.fork() == 0:
                listener.close()
                _supervise(connection)  # never returns
            connection.close()


def _reap() -> None:
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass


def _supervise(connection: socket.socket) -> None:
    """Fork the session, wait for it, and send its status (its exit code, or minus the signal that ended it); kill
    its process group if the client goes first (pytester's timeout)."""
    request, streams = _receive(connection)
    session = os.fork()
    if session == 0:
        connection.close()
        _become_session(request, streams)  # never returns
    for fd in streams:
        os.close(fd)
    status = _wait(session, connection)
    if status is None:
        os._exit(0)
    connection.sendall(str(status).encode())
    os._exit(0)


def _receive(connection: socket.socket) -> tuple[dict, list[int]]:
    header, streams, _, _ = socket.recv_fds(connection, HEADER.size, 3)
    while len(header) < HEADER.size:
        header += connection.recv(HEADER.size - len(header))
    (size,) = HEADER.unpack(header)
    body = b""
    while len(body) < size:
        body += connection.recv(size - len(body))
    return json.loads(body), list(streams)


def _wait(session: int, connection: socket.socket) -> int | None:
    """The session's status; None when the client closed the connection first (the session is killed then)."""
    pidfd = os.pidfd_open(session)
    while True:
        ready, _, _ = select.select([pidfd, connection], [], [])
        if pidfd in ready:
            _, status = os.waitpid(session, 0)
            return os.waitstatus_to_exitcode(status)
        if not connection.recv(1):  # the client is gone: its pytester timed out or was killed
            try:
                os.killpg(session, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(session, 0)
            return None


def _become_session(request: dict, streams: list[int]) -> None:
    """Turn this fork into ``python -m pytest ARGS`` started in the request's folder with its environment."""
    os.setpgid(0, 0)
    for target, fd in enumerate(streams):
        os.dup2(fd, target)
        os.close(fd)
    # as Python starts every interpreter: SIGINT raises KeyboardInterrupt; SIGPIPE and SIGXFSZ stay ignored (a write
    # to a dead worker's pipe raises BrokenPipeError), as the zygote, an interpreter, has them
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    _set_torch_threads(request["env"].get("OMP_NUM_THREADS"))
    python_path = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    # the zygote's own folder left sys.path at its start (the __main__ block): what remains is the interpreter's
    sys.path[:] = [request["cwd"], *python_path, *(p for p in sys.path if p not in python_path)]
    tempfile.tempdir = None  # TMPDIR is the request's
    sys.stdin = open(0, encoding="utf-8", errors="surrogateescape", closefd=False)
    sys.stdout = open(1, "w", encoding="utf-8", errors="backslashreplace", closefd=False)
    sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False)
    if "python" in request:
        _run_python_code(request["python"])  # never returns
    sys.argv = [sys.executable, *request["args"]]
    code = 1
    try:
        import pytest

        code = int(pytest.main(request["args"]))  # as `python -m pytest` (pytest.console_main, which is not public)
    except SystemExit as stop:
        code = _exit_status(stop)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        _exit(code)


def _set_torch_threads(setting: str | None) -> None:
    """Give torch the intra-op threads ``OMP_NUM_THREADS`` asks for: OpenMP read the variable when the zygote loaded
    torch, so a fork would keep the zygote's count where a fresh interpreter takes the request's."""
    import torch

    try:
        threads = int(setting) if setting else 0
    except ValueError:
        return  # as OpenMP does with a setting it cannot read: its default
    if threads > 0:
        torch.set_num_threads(threads)


def _run_python_code(arguments: list[str]) -> None:
    """As ``python [-u] [-B] -c CODE ARGS...`` would: CODE runs as ``__main__`` with ``sys.argv`` ``["-c", *ARGS]``
    and the current folder first on ``sys.path``; an uncaught exception is printed and exits 1.

    Raises:
        ValueError: other interpreter options (the client refuses them before asking: see zygote_client.py).
    """
    flags, code, rest = python_options(arguments)
    if "-u" in flags:
        sys.stdout.reconfigure(write_through=True)
    sys.dont_write_bytecode = sys.dont_write_bytecode or "-B" in flags
    sys.argv = ["-c", *rest]
    sys.path[0] = ""  # as -c puts it: the session's folder, as the sessions' list has it, is replaced
    main = types.ModuleType("__main__")
    main.__builtins__ = __builtins__
    sys.modules["__main__"] = main
    status = 1
    try:
        exec(compile(code, "<string>", "exec"), main.__dict__)
        status = 0
    except SystemExit as stop:
        status = _exit_status(stop)
        if not isinstance(stop.code, int) and stop.code is not None:
            print(stop.code, file=sys.stderr)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        _exit(status)


def python_options(arguments: list[str]) -> tuple[set[str], str, list[str]]:
    """The flags, the code and the arguments of an interpreter command line ``[-u] [-B] -c CODE ARGS...``.

    Raises:
        ValueError: any other form (a script, ``-m``, another option).
    """
    flags: set[str] = set()
    for index, argument in enumerate(arguments):
        if argument in PYTHON_FLAGS:
            flags.add(argument)
        elif argument == "-c" and index + 1 < len(arguments):
            return flags, arguments[index + 1], arguments[index + 2:]
        else:
            break
    raise ValueError(f"the zygote runs only `python [-u] [-B] -c CODE ...`, not {arguments!r}")


def _exit_status(stop: SystemExit) -> int:
    """The exit status an interpreter gives ``sys.exit(code)``: an int as is, None 0, anything else 1."""
    return stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)


def _exit(code: int) -> None:
    """End this fork as an interpreter ends: its exit handlers, its streams flushed."""
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


class Zygote:
    """The zygote of one self-test process: started by :meth:`start`, asked for sessions by :meth:`command`,
    stopped by :meth:`stop` (or when that process is gone: its standard input closes)."""

    def __init__(self, process: subprocess.Popen, folder: str) -> None:
        self.process, self.folder = process, folder
        self.socket = os.path.join(folder, "socket")

    @classmethod
    def start(cls) -> Zygote:
        """Start a zygote and wait until it listens (the imports: seconds).

        Raises:
            RuntimeError: it exited first (its standard error, kept in its folder, says why).
        """
        folder = tempfile.mkdtemp(prefix="hwz-", dir="/tmp")  # a unix socket's path has ~100 characters at most
        log = open(os.path.join(folder, "stderr"), "wb")  # the zygote's own, for as long as it runs
        process = subprocess.Popen([sys.executable, __file__, os.path.join(folder, "socket")], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=log, text=True)
        log.close()
        if process.stdout.readline().strip() != "ready":
            process.wait()
            raise RuntimeError(f"the self-tests' zygote exited ({process.returncode}): "
                               f"{Path(folder, 'stderr').read_text()[-2000:]}")
        return cls(process, folder)

    def command(self) -> tuple[str, ...]:
        """What runs ``python -m pytest`` in this zygote: the arguments follow."""
        return (sys.executable, str(CLIENT), self.socket)

    def python_command(self) -> str:
        """A shell command line that acts as ``python`` for ``-c`` code (execnet's popen bootstrap), forked from this
        zygote."""
        return shlex.join([sys.executable, str(CLIENT), "--python", self.socket])

    @property
    def python(self) -> str:
        """The path of an executable that acts as ``python`` for ``-c`` code, forked from this zygote (what
        :meth:`python_command` runs): an A/B stack's interpreter in self-tests of the A/B engine's logic, whose
        workers then start without the imports' seconds. Any other command line runs in a fresh interpreter."""
        path = os.path.join(self.folder, "python")
        if not os.path.exists(path):
            with open(path, "w") as script:
                script.write(f"#!/bin/sh\nexec {self.python_command()} \"$@\"\n")
            os.chmod(path, 0o755)
        return path

    def stop(self) -> None:
        self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


if __name__ == "__main__":
    sys.path.pop(0)  # this folder: the sessions must not import the support modules from here
    preload()
    serve(sys.argv[1])
