"""A real local HTTP server for the alert self-tests: it records every request and answers as told (200, an error
status, or not at all until it is stopped)."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SECRET_PATH = "/services/T000/B000/secret-key-of-the-self-test"


class WebhookServer:
    """``with WebhookServer(status=200) as server:`` a server on 127.0.0.1 (a free port) in a thread; ``server.url``
    its webhook URL (with a secret-looking path), ``server.requests`` what it received: (path, headers, body).
    ``status=None``: it reads the request and never answers (a hanging webhook) until the ``with`` ends."""

    def __init__(self, status: int | None = 200) -> None:
        self.status = status
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
                self.send_response(owner.status)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

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
