"""A stack's worker process seen from the orchestrator: started in a session of its own with the stack's interpreter
and environment, asked one request at a time under a timeout, and ended with its whole process group.

A worker that dies mid-request is :class:`WorkerDied` with its exit status and the tail of its stderr (kept in a
temporary file, which cannot fill as a pipe could); one that overruns the timeout is killed, :class:`WorkerTimedOut`; an
interpreter that cannot import hwregress or torch is :class:`StackUnusable` at ``hello``. No worker outlives the
session: leaving the ``with`` block, the garbage collector and the interpreter's exit each end the worker's process
group (SIGTERM, then SIGKILL). Torch-free.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import subprocess
import tempfile
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, BinaryIO

import hwregress
from hwregress.ab.protocol import Case, decode_response, encode
from hwregress.ab.stacks import Stack
from hwregress.ab.worker_environment import MALLOC_SETTINGS, WORKER_BOOT, worker_environment
from hwregress.process_group import TERM_GRACE_S, end_process_group, exit_status

CLOSE_GRACE_S = 10.0  # for a worker to exit after close (interpreter shutdown with torch loaded), before SIGTERM
POLL_S = 0.2  # how often a wait for a response looks whether the worker is still alive
STDERR_TAIL_BYTES = 4000
MISSING_MODULE = re.compile(r"No module named '([\w.]+)'")


class WorkerError(RuntimeError):
    """Something went wrong with a stack's worker; the message names the stack and its interpreter."""


class WorkerDied(WorkerError):
    """The worker exited (or was killed) while a request was in flight.

    Attributes:
        label: the stack's label (``"A"``, ``"B"``).
        returncode: the exit status as ``subprocess`` gives it: ``-N`` for killed by signal N.
        stderr_tail: the last lines the worker wrote to stderr.
        op: the request in flight (``"hello"``: the worker died starting up).
    """

    def __init__(self, message: str, label: str, returncode: int | None, stderr_tail: str, op: str = "") -> None:
        super().__init__(message)
        self.label = label
        self.returncode = returncode
        self.stderr_tail = stderr_tail
        self.op = op

    @property
    def signal(self) -> int | None:
        """The signal that killed the worker, None if it exited by itself."""
        return -self.returncode if self.returncode is not None and self.returncode < 0 else None


class WorkerTimedOut(WorkerError):
    """A request (``op``; ``"hello"``: the worker never finished starting up) took longer than the timeout; the
    worker was killed."""

    def __init__(self, message: str, op: str = "") -> None:
        super().__init__(message)
        self.op = op


class WorkerFailed(WorkerError):
    """The worker answered ``ok: false``; it still serves.

    Attributes:
        error: the worker's ``"Type: message"``.
        traceback: the worker's traceback.
        kind: ``"oom"`` for an allocation failure, else ``"error"``.
    """

    def __init__(self, message: str, error: str, traceback: str, kind: str) -> None:
        super().__init__(message)
        self.error = error
        self.traceback = traceback
        self.kind = kind


class StackUnusable(WorkerError):
    """The stack's interpreter cannot run a worker: it cannot import hwregress, torch or another module."""


def _end(process: subprocess.Popen[bytes], stderr: BinaryIO) -> None:
    """End the worker's group, close its pipes and the read handle of its stderr (the finalizer's work)."""
    end_process_group(process)
    for stream in (process.stdin, process.stdout):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    stderr.close()


class StackWorker:
    """The worker of one stack, as a context manager::

        with StackWorker(stack, "cuda:0", timeout_s=600) as worker:
            fingerprint = worker.hello()
            worker.prepare(Case("resnet50", "train", 64, device="cuda:0"))
            answer = worker.window(20)  # {"seconds": ..., "samples_per_s": ...}

    Args:
        stack: the stack whose interpreter and settings the worker runs with.
        device: the torch device spec the worker measures on.
        timeout_s: the longest any request may take (the first ``hello`` includes the interpreter's start and
            torch's import); a request that takes longer kills the worker.
        workload_modules: the session's ``--workloads`` modules, imported by the worker at ``hello``.
    """

    def __init__(self, stack: Stack, device: str, timeout_s: float, workload_modules: Iterable[str] = ()) -> None:
        self.stack = stack
        self.device = device
        self.timeout_s = timeout_s
        self.workload_modules = list(workload_modules)
        self.name = f"worker {stack.label} ({stack.python})"
        self._process: subprocess.Popen[bytes] | None = None
        self._finalizer: weakref.finalize | None = None
        self._stderr: BinaryIO | None = None  # a read handle of the worker's stderr file (its name is removed)
        self._buffer = b""
        self._in_flight: str | None = None  # the op of a request sent and not yet answered
        self._asked_to_close = False

    def __enter__(self) -> StackWorker:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def pid(self) -> int:
        """The worker's pid, which is also its process group's id (kept after the worker has ended).

        Raises:
            WorkerError: the worker was never started.
        """
        return self._started().pid

    @property
    def returncode(self) -> int | None:
        """The worker's exit status once it has ended and been reaped (``-N``: killed by signal N), else None.

        Raises:
            WorkerError: the worker was never started.
        """
        return self._started().returncode

    def start(self) -> None:
        """Start the worker process (:data:`WORKER_BOOT`: ``<stack.python> -m hwregress.ab.worker``) in a new session,
        stdin and stdout pipes, stderr to a temporary file (its name removed at once: nothing is left behind, even by
        a session killed outright); ending it is registered with a finalizer that also runs at exit.

        Raises:
            WorkerError: the interpreter could not be executed; names it.
        """
        descriptor, path = tempfile.mkstemp(prefix=f"hwregress-ab-{self.stack.label}-", suffix=".log")
        try:
            self._stderr = open(path, "rb")  # closed by the finalizer (_end)
            with os.fdopen(descriptor, "wb") as stderr:
                self._process = subprocess.Popen([self.stack.python, "-c", WORKER_BOOT], stdin=subprocess.PIPE,
                                                 stdout=subprocess.PIPE, stderr=stderr, start_new_session=True,
                                                 env=worker_environment(self.stack, os.environ))
        except OSError as error:
            if self._stderr is not None:
                self._stderr.close()
            raise WorkerError(f"{self.name} could not be started: {error}; give the path of a Python interpreter "
                              "with --ab-python") from None
        finally:
            os.unlink(path)
        self._finalizer = weakref.finalize(self, _end, self._process, self._stderr)

    def hello(self, env_keys: Iterable[str] = ()) -> dict[str, Any]:
        """The stack's fingerprint (:func:`hwregress.ab.worker.fingerprint`), reporting the stack's own settings'
        keys and ``env_keys`` (pass the other stack's, so both fingerprints show them).

        Raises:
            StackUnusable: the interpreter cannot import hwregress, torch or another module the worker needs; names
                the interpreter, the module and the fix.
            WorkerDied, WorkerTimedOut, WorkerFailed: see :meth:`request`.
        """
        keys = list(dict.fromkeys([*MALLOC_SETTINGS, *self.stack.env, *env_keys]))
        request = {"op": "hello", "device": self.device, "env_keys": keys, "workload_modules": self.workload_modules}
        try:
            return self.request(request)["fingerprint"]
        except WorkerDied as died:
            unusable = self._unusable(died.stderr_tail)
            if unusable is None:
                raise
            raise StackUnusable(unusable) from died

    def prepare(self, case: Case) -> dict[str, Any]:
        """Build and warm up ``case`` (its device must be this worker's); ``{"unit": ..., "work_per_step": ...}``.

        Raises:
            ValueError: the case is for another device.
            WorkerDied, WorkerTimedOut, WorkerFailed: see :meth:`request` (an unknown model is a WorkerFailed).
        """
        if case.device != self.device:
            raise ValueError(f"{self.name} measures on {self.device}, not on the case's {case.device}")
        return self.request({"op": "prepare", "case": case.to_dict()})

    def window(self, steps: int, timeout_s: float | None = None) -> dict[str, Any]:
        """Time ``steps`` steps of the prepared case after one untimed step (:func:`hwregress.ab.worker.time_window`);
        ``timeout_s`` overrides the worker's timeout for this request.

        Raises:
            WorkerDied, WorkerTimedOut, WorkerFailed: see :meth:`request`.
        """
        return self.request({"op": "window", "steps": steps}, timeout_s)

    def release(self) -> None:
        """Drop the prepared case and return its device memory (the other stack's model is to be built next).

        Raises:
            WorkerDied, WorkerTimedOut, WorkerFailed: see :meth:`request`.
        """
        self.request({"op": "release"})

    def request(self, message: dict[str, Any], timeout_s: float | None = None) -> dict[str, Any]:
        """Send ``message`` and return the worker's ``ok: true`` response.

        Raises:
            WorkerFailed: the worker answered ``ok: false`` (it still serves).
            WorkerDied: the worker exited or was killed before answering; its group is ended.
            WorkerTimedOut: no answer within the timeout; the worker's group is killed.
            ProtocolError: the worker answered a line that is no response.
        """
        op = str(message.get("op"))
        process = self._running()
        self._in_flight = op
        try:
            assert process.stdin is not None
            process.stdin.write(encode(message))
            process.stdin.flush()
        except (BrokenPipeError, ConnectionResetError):
            raise self._died(op) from None
        line = self._read_line(op, timeout_s or self.timeout_s)
        self._in_flight = None
        response = decode_response(line, self.name)
        if not response["ok"]:
            raise WorkerFailed(f"{self.name}: {op} failed: {response['error']}", response["error"],
                               response["traceback"], str(response.get("kind", "error")))
        return response

    def ask_to_close(self) -> bool:
        """Send ``close`` and close the worker's stdin without waiting (:meth:`close` then waits); whether it was
        asked. A worker busy with a request, ended or never started is not asked."""
        process = self._process
        if process is None or self._finalizer is None or not self._finalizer.alive or self._in_flight is not None:
            return False
        if process.poll() is None and not self._asked_to_close:
            self._asked_to_close = True
            with contextlib.suppress(OSError, ValueError):
                assert process.stdin is not None
                process.stdin.write(encode({"op": "close"}))
                process.stdin.close()
        return True

    def end(self) -> None:
        """End the worker's whole process group now (SIGTERM, then SIGKILL after a grace), without asking it to
        close; idempotent."""
        if self._finalizer is not None:
            self._finalizer()

    def close(self) -> None:
        """Ask the worker to exit, give it :data:`CLOSE_GRACE_S`, then end its whole process group; idempotent. A
        worker still busy with a request (the session was interrupted mid-window) is not asked: its group is ended at
        once."""
        process = self._process
        if process is None or self._finalizer is None or not self._finalizer.alive:
            return
        if self.ask_to_close():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(CLOSE_GRACE_S)
        self._finalizer()

    def stderr_tail(self) -> str:
        """The last :data:`STDERR_TAIL_BYTES` of the worker's stderr ("" when there is none)."""
        if self._stderr is None:
            return ""
        try:  # this handle's offset is its own: the worker writes through another open of the file
            self._stderr.seek(max(0, os.fstat(self._stderr.fileno()).st_size - STDERR_TAIL_BYTES))
            return self._stderr.read().decode("utf-8", errors="replace")
        except (OSError, ValueError):  # ValueError: the handle was closed when the worker was ended
            return ""

    def _started(self) -> subprocess.Popen[bytes]:
        if self._process is None:
            raise WorkerError(f"{self.name} was never started: use it in a with block or call start()")
        return self._process

    def _running(self) -> subprocess.Popen[bytes]:
        process = self._started()
        if self._finalizer is None or not self._finalizer.alive:
            raise WorkerError(f"{self.name} has been ended; start a new worker")
        return process

    def _read_line(self, op: str, timeout_s: float) -> bytes:
        """The next response line, waiting up to ``timeout_s`` seconds.

        Raises:
            WorkerDied: end of the channel, or the worker gone without it ending (a child of its holds it).
            WorkerTimedOut: ``timeout_s`` passed.
        """
        process = self._running()
        assert process.stdout is not None
        channel = process.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self._timed_out(op, timeout_s)
            ready, _, _ = select.select([channel], [], [], min(remaining, POLL_S))
            if ready:
                chunk = os.read(channel, 1 << 16)
                if not chunk:
                    raise self._died(op)
                self._buffer += chunk
            elif process.poll() is not None:
                raise self._died(op)
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def _died(self, op: str) -> WorkerDied:
        """The worker left mid-request: give it a moment to finish exiting, end its group, describe it."""
        process = self._running()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(TERM_GRACE_S)
        returncode = process.poll()
        tail = self.stderr_tail()
        self._finalizer()  # type: ignore[misc]
        message = (f"{self.name} died during {op}: {exit_status(returncode)}; the last lines of its stderr:\n"
                   f"{_indented(tail)}")
        return WorkerDied(message, self.stack.label, returncode, tail, op)

    def _timed_out(self, op: str, timeout_s: float) -> WorkerTimedOut:
        tail = self.stderr_tail()
        self._finalizer()  # type: ignore[misc]
        return WorkerTimedOut(f"{self.name} did not answer {op} within {timeout_s:g} s; it was killed. The last "
                              f"lines of its stderr:\n{_indented(tail)}", op)

    def _unusable(self, stderr_tail: str) -> str | None:
        """Why the interpreter cannot run a worker, from the stderr of one that died at start; None if that is not
        why."""
        missing = MISSING_MODULE.findall(stderr_tail)
        if not missing:
            return None
        python, module = self.stack.python, missing[-1]
        if module.startswith("hwregress."):
            return (f"stack {self.stack.label}'s interpreter {python} imports a hwregress without {module}, so it "
                    f"cannot run an A/B worker; install this session's hwregress ({hwregress.__version__}, from "
                    f"{Path(hwregress.__file__).parent}) into it, or keep this checkout on its PYTHONPATH")
        return (f"stack {self.stack.label}'s interpreter {python} cannot import {module} (No module named "
                f"{module!r}), so it cannot run an A/B worker; pip install hwregress torch into it ({python} -m pip "
                f"install hwregress torch), or name an interpreter that has them with --ab-python")


def _indented(text: str) -> str:
    lines = text.rstrip().splitlines() or ["(nothing)"]
    return "\n".join(f"    {line}" for line in lines[-20:])


WorkerPair = tuple["StackWorker", "StackWorker"]
PairStarter = Callable[[], AbstractContextManager[WorkerPair]]
"""Starts a fresh pair of workers (stack A's, stack B's) as a context manager that ends both on exit."""


@contextlib.contextmanager
def started_pair(stacks: tuple[Stack, Stack], device: str, timeout_s: float,
                 workload_modules: Iterable[str] = ()) -> Iterator[WorkerPair]:
    """Stack A's and stack B's workers on ``device``, both started before either is asked anything (their
    interpreters start and import torch side by side), both ended at the block's end (:meth:`StackWorker.end`: a
    worker holds nothing to save, and a graceful exit with torch loaded took a second on the 2-core VM, at every
    process pair of every test).

    Raises:
        WorkerError: an interpreter could not be executed (the other worker is ended).
    """
    workers = tuple(StackWorker(stack, device, timeout_s, workload_modules) for stack in stacks)
    started: list[StackWorker] = []
    try:
        for worker in workers:
            worker.start()
            started.append(worker)
        yield workers  # type: ignore[misc]
    finally:
        for worker in started:
            worker.end()
