"""One JSON message POSTed to a webhook (``--alert-webhook``): the URL checked before anything is sent, the whole
request (connecting, sending, reading the answer) bounded by one deadline, no redirect followed (a redirect is no
delivery), ``user:password@`` in the URL sent as HTTP Basic authentication (RFC 7617), the environment's proxy
settings honoured as urllib honours them.

The URL is a secret (a Slack webhook's path is its key): what this module says shows it only as ``scheme://host/***``
(:func:`masked`), and :func:`scrubbed` takes its secret parts out of any other text. Pytest-free.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urljoin, urlsplit, urlunsplit

TIMEOUT_S = 5.0  # the whole request's, not each socket read's: a server dripping bytes would hold a read open
NOT_HTTP = "(a URL that is not http(s))"
ANSWER_BYTES = 200  # of an error answer's body, shown
NO_ANSWER = "the webhook did not answer within {:g} s (connecting, sending and reading its answer together)"


def masked(url: str) -> str:
    """``url`` with everything after its host (the path, the query, user and password) replaced by ``***``, e.g.
    ``https://hooks.slack.com/***``; ``(a URL that is not http(s))`` when it has no http(s) scheme and host."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        return NOT_HTTP
    if parts.scheme not in ("http", "https") or not host:
        return NOT_HTTP
    try:
        port = parts.port
    except ValueError:  # not a number: said by target_of
        port = None
    return f"{parts.scheme}://{host}{f':{port}' if port else ''}/***"


def scrubbed(text: str, url: str) -> str:
    """``text`` with ``url`` shown :func:`masked` and its path, query and credentials, wherever else they stand, as
    ``***``."""
    text = text.replace(url, masked(url))
    netloc, slash, rest = url.partition("://")[2].partition("/")
    secrets = [slash + rest, netloc.rpartition("@")[0]]  # as given: urlsplit drops tabs and newlines
    try:
        parts = urlsplit(url)
        secrets += [parts.path, parts.query, parts.username or "", parts.password or ""]
    except ValueError:
        secrets.append(url)
    for secret in sorted(filter(lambda part: len(part) > 1, secrets), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


@dataclass(frozen=True)
class Target:
    """A webhook URL checked for sending: ``url`` without its credentials, ``authorization`` the Basic header they
    make (None without credentials)."""

    url: str
    authorization: str | None


def target_of(url: str) -> Target:
    """``url`` checked and split for :func:`post_json`.

    Raises:
        ValueError: not an http(s) URL with a host, a port that is no number in 0-65535, or a space, control or
            non-ASCII character (http.client would refuse it, printing the path); the message never shows the path.
    """
    if masked(url) == NOT_HTTP:
        raise ValueError(f"{NOT_HTTP}: give http(s)://HOST/PATH")
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        raise ValueError("its port is no number in 0-65535; give http(s)://HOST[:PORT]/PATH") from None
    if any(not " " < character < "\x7f" for character in url):
        raise ValueError("its URL holds a space, a control or a non-ASCII character (not shown: the path is the "
                         "webhook's key); percent-encode it (a space is %20) or copy the webhook's URL again")
    host = f"[{parts.hostname}]" if ":" in (parts.hostname or "") else parts.hostname
    netloc = f"{host}:{port}" if port is not None else str(host)
    authorization = None
    if parts.username is not None or parts.password is not None:
        pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}".encode()
        authorization = f"Basic {base64.b64encode(pair).decode('ascii')}"
    return Target(urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, "")), authorization)


def post_json(url: str, payload: Mapping[str, Any], timeout_s: float = TIMEOUT_S) -> str | None:
    """POST ``payload`` as JSON to ``url`` within ``timeout_s`` seconds in all; None when the server answered 2xx,
    else what went wrong in words, never the URL's path (a bad URL, no connection, no answer in time, a redirect, an
    HTTP error status). Never raises for a bad URL, a network or an HTTP failure."""
    try:
        target = target_of(url)
    except ValueError as error:
        return str(error)
    exchange = _Exchange(target, json.dumps(payload, allow_nan=False).encode("utf-8"), timeout_s)
    thread = threading.Thread(target=exchange.run, name="hwregress-webhook", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():  # a name lookup cannot be ended: the daemon thread is left to it
        exchange.abort()
        return NO_ANSWER.format(timeout_s)
    return scrubbed(exchange.problem(url), url) if exchange.failed else None


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # the 3xx comes back as an HTTPError


class _Recorded:
    """Makes urllib's HTTP handlers keep each connection they open, so that :meth:`_Exchange.abort` can shut its
    socket: a read blocked on a dripping server ends then, not at the server's pleasure."""

    def __init__(self, connections: list[http.client.HTTPConnection]) -> None:
        super().__init__()
        self.connections = connections

    def do_open(self, http_class: Any, request: Any, **kwargs: Any) -> Any:
        def made(*args: Any, **more: Any) -> http.client.HTTPConnection:
            connection = http_class(*args, **more)
            self.connections.append(connection)
            return connection

        return super().do_open(made, request, **kwargs)  # type: ignore[misc]  # a mixin: the handler has it


class _RecordedHTTP(_Recorded, urllib.request.HTTPHandler):
    pass


class _RecordedHTTPS(_Recorded, urllib.request.HTTPSHandler):
    pass


class _Exchange:
    """One POST, run in a thread of its own (:meth:`run`), and what it came to: the answer's status, reason,
    ``Location`` and first bytes, or the error."""

    def __init__(self, target: Target, body: bytes, timeout_s: float) -> None:
        headers = {"Content-Type": "application/json; charset=utf-8", "User-Agent": "hwregress-alerts"}
        if target.authorization is not None:
            headers["Authorization"] = target.authorization
        self.request = urllib.request.Request(target.url, data=body, method="POST", headers=headers)
        self.timeout_s = timeout_s
        self.connections: list[http.client.HTTPConnection] = []
        self.opener = urllib.request.build_opener(_NoRedirect(), _RecordedHTTP(self.connections),
                                                  _RecordedHTTPS(self.connections))
        self.status: int | None = None
        self.reason = ""
        self.location: str | None = None
        self.answer = ""
        self.error: Exception | None = None

    @property
    def failed(self) -> bool:
        return self.status is None or not 200 <= self.status < 300

    def run(self) -> None:
        try:
            with self.opener.open(self.request, timeout=self.timeout_s) as response:
                response.read(4096)
                self.status = response.status
        except urllib.error.HTTPError as error:  # read here: an answer's body may drip too
            with error:
                self.status, self.reason, self.location = error.code, str(error.reason), error.headers.get("Location")
                with contextlib.suppress(OSError, http.client.HTTPException):
                    self.answer = error.read(ANSWER_BYTES).decode("utf-8", "replace").strip()
        except Exception as error:  # said by problem(): a thread's exception would be lost
            self.error = error

    def abort(self) -> None:
        """Shut the connection's socket: the thread's blocked read or write ends at once."""
        for connection in list(self.connections):
            sock = connection.sock
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def problem(self, url: str) -> str:
        """What went wrong, in words (``url``: the webhook's, against which a relative redirect resolves)."""
        error, status = self.error, self.status
        if isinstance(error, urllib.error.URLError):
            return f"no connection ({_reason(error.reason)})"
        if isinstance(error, TimeoutError):
            return NO_ANSWER.format(self.timeout_s)
        if error is not None or status is None:
            return f"failed ({_reason(error)})"
        if 300 <= status < 400:
            where = f"a redirect to {masked(urljoin(url, self.location))}" if self.location else "a redirect"
            return f"the webhook answered {status} {self.reason} ({where}): not delivered; give the URL it redirects to"
        return f"HTTP {status} {self.reason}".rstrip() + (f" ({' '.join(self.answer.split())})" if self.answer else "")


def _reason(reason: Any) -> str:
    if isinstance(reason, TimeoutError):
        return "timed out"
    return str(reason) or type(reason).__name__
