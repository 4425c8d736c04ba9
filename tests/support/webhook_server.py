"""A real local HTTP server for the alert self-tests: it records every request and answers as told (200, an error
status, a redirect, not at all until it is stopped, or one byte at a time)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SECRET_PATH = "/services/T000/B000/secret-key-of-the-self-test"


class WebhookServer:
    """``with WebhookServer(status=200) as server:`` a server on 127.0.0.1 (a free port) in a thread; ``server.url``
    its webhook URL (with a secret-looking path), ``server.requests`` what it received: (path, headers, body), a GET's
    body ``b""``. ``status=None``: it reads the request and never answers (a hanging webhook) until the ``with`` ends.
    ``headers``: more headers of the answer (a redirect's ``Location``). ``drip_s``: the answer is written one byte
    every ``drip_s`` seconds (each read of the client's within any per-read timeout) until the ``with`` ends."""

    def __init__(self, status: int | None = 200, headers: Mapping[str, str] | None = None,
                 drip_s: float | None = None) -> None:
        self.status = status
        self.headers = dict(headers or {})
        self.drip_s = drip_s
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        self.released = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                owner.requests.append((self.path, dict(self.headers), body))
                if owner.status is None:
                    owner.released.wait(60)
                    return
                answer = b"ok" if owner.status < 400 else b"invalid_payload"
                if owner.drip_s is not None:
                    self._drip(f"{self.protocol_version} {owner.status} OK\r\nContent-Length: {len(answer)}\r\n\r\n"
                               .encode() + answer)
                    return
                self.send_response(owner.status)
                for name, value in owner.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def do_GET(self) -> None:  # where a client that follows a redirect goes
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                owner.requests.append((self.path, dict(self.headers), b""))
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def _drip(self, answer: bytes) -> None:
                for byte in answer:
                    if owner.released.wait(owner.drip_s):
                        return
                    try:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                    except OSError:  # the client gave up
                        return

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}{SECRET_PATH}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> WebhookServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)

    def messages(self) -> list[dict[str, Any]]:
        """The JSON body of each request received."""
        return [json.loads(body) for _, _, body in self.requests]


def closed_port_url() -> str:
    """A URL on 127.0.0.1 whose port nothing listens on (bound, then closed): a refused connection."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}{SECRET_PATH}"
