"""``python zygote_client.py SOCKET PYTEST_ARGS...``: run ``python -m pytest PYTEST_ARGS`` in the zygote listening on
``SOCKET`` (:mod:`zygote`) with this process's standard streams, folder and environment, and exit as that session
did. ``python zygote_client.py --python SOCKET [-u] [-B] -c CODE ARGS...``: the same for ``python -c CODE`` (any
other interpreter command line runs in this interpreter instead). Standard library only: it starts in
milliseconds."""

import json
import os
import signal
import socket
import sys

from zygote import HEADER, python_options  # this folder is first on sys.path (zygote imports no torch)


def main() -> None:
    if sys.argv[1] == "--python":  # `python [-u] [-B] -c CODE ARGS...` (an xdist worker's start), not pytest
        path, request = sys.argv[2], {"python": sys.argv[3:]}
        try:
            python_options(sys.argv[3:])
        except ValueError:  # anything else the zygote cannot do as a fresh interpreter would
            os.execv(sys.executable, [sys.executable, *sys.argv[3:]])
    else:
        path, request = sys.argv[1], {"args": sys.argv[2:]}
    body = json.dumps({**request, "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.connect(path)
        socket.send_fds(connection, [HEADER.pack(len(body))], [0, 1, 2])
        connection.sendall(body)  # kept open: the zygote kills the session when this process is gone
        answer = b""
        while chunk := connection.recv(64):
            answer += chunk
    if not answer:
        sys.exit("zygote_client: the zygote closed the connection without the session's status")
    status = int(answer)
    if status < 0:  # the session died of a signal: so does this process, as pytester expects of a session
        if -status not in (signal.SIGKILL, signal.SIGSTOP):  # those two cannot be caught, nor need resetting
            signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    sys.exit(status)


if __name__ == "__main__":
    main()
