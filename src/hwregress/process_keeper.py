"""The keeper of a child process group: ``python -m hwregress.process_keeper LOG -- COMMAND...``.

It starts ``COMMAND`` (a served model, a bisection's A/B session) in a session of its own, with its standard output
and error appended to ``LOG``, prints ``started <pid>``, and then waits for one of two things:

- its standard input closes or says anything (its owner is done with the child, or died: a process killed by SIGKILL
  closes the pipe too): it ends the child's whole process group (SIGTERM, then SIGKILL: a server's engine processes
  go with it) and exits 0;
- the child exits on its own: the keeper prints ``exited <returncode>`` (negative: killed by that signal), ends what
  is left of the child's group and exits with status :data:`CHILD_EXITED`.

It ignores SIGINT: a Ctrl-C reaches the whole foreground process group, and the owner, not the keeper, decides what
ends (the owner closes the keeper's standard input, and the group goes). A child cannot always be asked to watch its
parent (``transformers serve`` and ``vllm serve`` are not ours), so this small process does, as an A/B worker watches
its standard input (:mod:`hwregress.ab.worker`). It imports nothing but the floor's :mod:`hwregress.process_group`,
so it starts in a few tens of milliseconds.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
from typing import NoReturn

from hwregress.process_group import TERM_GRACE_S, end_process_group

CHILD_EXITED = 3  # the keeper's exit status when the child ended on its own
POLL_S = 0.2


def keep(log_path: str, command: list[str]) -> int:
    """Run the child and watch it and standard input (see the module docstring); returns the exit status."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with open(log_path, "ab") as log:
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True)
    signal.signal(signal.SIGTERM, lambda *_: _end(child, 0))
    print(f"started {child.pid}", flush=True)
    while True:
        readable, _, _ = select.select([sys.stdin], [], [], POLL_S)
        if readable:
            return _end(child, 0)  # a line or end of file: either way, done
        if child.poll() is not None:
            print(f"exited {child.returncode}", flush=True)
            return _end(child, CHILD_EXITED)


def _end(child: subprocess.Popen[bytes], status: int) -> NoReturn:
    end_process_group(child)
    sys.stdout.flush()
    os._exit(status)  # also from the SIGTERM handler, wherever the main loop was


def stop(keeper: subprocess.Popen[bytes]) -> None:
    """Ask a keeper (started with piped standard input, in a session of its own) to end its child: close its standard
    input, wait for it, and end the keeper's own group if it does not exit in time; idempotent."""
    if keeper.stdin is not None and not keeper.stdin.closed:
        with contextlib.suppress(OSError):
            keeper.stdin.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        keeper.wait(4 * TERM_GRACE_S)
    end_process_group(keeper)
    if keeper.stdout is not None:
        keeper.stdout.close()


def main(argv: list[str] | None = None) -> None:
    """``LOG -- COMMAND...``: see the module docstring."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 3 or args[1] != "--":
        sys.exit("usage: python -m hwregress.process_keeper LOG -- COMMAND...")
    sys.exit(keep(args[0], args[2:]))


if __name__ == "__main__":
    main()
