"""The load client's reading of a stream (hwregress.serving.client) against a real local HTTP server whose answers are
scripted by prompt: a good stream's timings and usage, and each way a request fails (an HTTP error, the error event
``transformers serve`` sends when its generation fails, a stream cut before its finish_reason, a line that is not
JSON) recorded as that request's error, the other requests of the window unharmed."""

from __future__ import annotations

import http.server
import json
import re
import threading
from collections.abc import Iterator

import pytest

from hwregress.serving.trace import Arrivals, fixed_lengths, make_trace

httpx = pytest.importorskip("httpx")
pytestmark = pytest.mark.needs_extra

GOOD = ['{"choices": [{"text": " t5", "finish_reason": null}]}',
        '{"choices": [{"text": " t6", "finish_reason": null}]}',
        '{"choices": [{"text": "", "finish_reason": "length"}], "usage": {"prompt_tokens": 4, "completion_tokens": 2}}',
        "[DONE]"]
SCRIPTS = {  # prompt -> (status, data lines)
    "good": (200, GOOD),
    "overloaded": (503, ['{"detail": "too many requests"}']),
    "failed": (200, ['{"choices": [{"text": " t5", "finish_reason": null}]}', '{"error": "index out of range"}']),
    "cut": (200, GOOD[:2]),
    "garbled": (200, ["{not json"]),
}


class _Scripted(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        status, lines = SCRIPTS[body["prompt"]]
        self.send_response(status)
        self.send_header("Content-Type", "text/event-stream" if status == 200 else "application/json")
        self.send_header("Connection", "close")
        self.end_headers()
        for line in lines:
            self.wfile.write((f"data: {line}\n\n" if status == 200 else line).encode())
            self.wfile.flush()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Scripted)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _replay(url: str, prompts: list[str]):
    from hwregress.serving.client import replay

    trace = make_trace(3, len(prompts), Arrivals(concurrency=1), fixed_lengths(4, 2))
    return replay(url, "m", trace, lambda request: prompts[request.index], timeout_s=10)


def test_a_good_stream_gives_its_chunks_times_and_the_usage_counts(url):
    (timing,) = _replay(url, ["good"]).timings
    assert timing.error is None
    assert (timing.prompt_tokens, timing.output_tokens, len(timing.chunk_times_s)) == (4, 2, 2)
    assert 0 <= timing.sent_s < timing.chunk_times_s[0] <= timing.chunk_times_s[1]


@pytest.mark.parametrize(("prompt", "error"), [
    ("overloaded", r"^HTTP 503: \{\"detail\": \"too many requests\"\}$"),
    ("failed", r"^the server's stream reported: index out of range$"),
    ("cut", r"^the stream ended before its finish_reason$"),
    ("garbled", r"^a stream line that is not JSON"),
])
def test_each_way_a_request_fails_is_its_error_and_the_others_are_unharmed(url, prompt, error):
    good, failed, after = _replay(url, ["good", prompt, "good"]).timings
    assert failed.error is not None and re.match(error, failed.error), failed.error
    assert good.error is None and after.error is None
