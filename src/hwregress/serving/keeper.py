"""The keeper of a served model's process: ``python -m hwregress.serving.keeper LOG -- COMMAND...``.

It starts ``COMMAND`` (the server) in a session of its own, with its standard output and error appended to ``LOG``,
prints ``started <pid>``, and then waits for one of two things:

- its standard input closes or says anything (the test session is done with the server, or died: a pytest process
  killed by SIGKILL closes the pipe too): it ends the server's whole process group (SIGTERM, then SIGKILL: a server's
  engine processes go with it) and exits 0;
- the server exits on its own: the keeper exits with status :data:`SERVER_EXITED`, after ending what is left of the
  server's group.

A server cannot be asked to watch its parent (``transformers serve`` and ``vllm serve`` are not ours), so this small
process does, as an A/B worker watches its standard input (:mod:`hwregress.ab.worker`). It imports nothing but the
floor's :mod:`hwregress.process_group`, so it starts in a few tens of milliseconds.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from typing import NoReturn

from hwregress.process_group import end_process_group

SERVER_EXITED = 3  # the keeper's exit status when the server ended on its own
POLL_S = 0.2


def keep(log_path: str, command: list[str]) -> int:
    """Run the server and watch it and standard input (see the module docstring); returns the exit status."""
    with open(log_path, "ab") as log:
        server = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    signal.signal(signal.SIGTERM, lambda *_: _end(server, 0))
    print(f"started {server.pid}", flush=True)
    while True:
        readable, _, _ = select.select([sys.stdin], [], [], POLL_S)
        if readable:
            return _end(server, 0)  # a line or end of file: either way, done
        if server.poll() is not None:
            return _end(server, SERVER_EXITED)


def _end(server: subprocess.Popen[bytes], status: int) -> NoReturn:
    end_process_group(server)
    sys.stdout.flush()
    os._exit(status)  # also from the SIGTERM handler, wherever the main loop was


def main(argv: list[str] | None = None) -> None:
    """``LOG -- COMMAND...``: see the module docstring."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 3 or args[1] != "--":
        sys.exit("usage: python -m hwregress.serving.keeper LOG -- COMMAND...")
    sys.exit(keep(args[0], args[2:]))


if __name__ == "__main__":
    main()
