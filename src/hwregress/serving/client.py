"""The load client: one replay of a trace (:mod:`hwregress.serving.trace`) against an OpenAI-compatible server's
streaming ``/v1/completions``, every request's timestamps recorded (:class:`hwregress.serving.requests.RequestTiming`).

Asyncio with httpx's streaming client. An open loop sends each request at its arrival time (``window start +
arrival_s``), whether or not earlier ones have ended, as ``vllm bench serve`` does; a closed loop runs
``concurrency`` clients, each sending the next request of the trace when its last one ended. The connection pool is
unbounded (as vLLM's ``TCPConnector(limit=0)``): a request never waits for a connection on the client's side, so the
client's queueing is not timed as the server's.

Per request, as vLLM's ``async_request_openai_completions``: the send time just before the request goes out, the
arrival time of every streamed chunk with text, the usage's token counts from the last chunk (the chunks with text
counted where the server sends no usage). A request fails, and is recorded with its error, on an HTTP status other
than 200, a broken connection, an ``error`` event in the stream (``transformers serve`` sends one when its generation
fails), a stream that ends without a ``finish_reason``, or no end within ``timeout_s``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from hwregress.serving.requests import RequestTiming
from hwregress.serving.trace import Trace, TraceRequest

REQUEST_TIMEOUT_S = 120.0
ERROR_BODY_CHARS = 200


@dataclass(frozen=True)
class Replay:
    """What one replay of a trace recorded.

    Attributes:
        timings: every request's timestamps, by trace index.
        duration_s: from the window's start to its last request's end, s.
    """

    timings: tuple[RequestTiming, ...]
    duration_s: float


def replay(url: str, model: str, trace: Trace, prompt_of: Callable[[TraceRequest], str],
           timeout_s: float = REQUEST_TIMEOUT_S, extra_body: Mapping[str, Any] | None = None) -> Replay:
    """Replay ``trace`` against the server at ``url`` (``http://host:port``) serving ``model``.

    Args:
        prompt_of: a request's prompt text (:meth:`hwregress.workloads.served.ServedModel.prompt_text` of its ids).
        timeout_s: the most one request may take, from its send to its last chunk.
        extra_body: fields added to every request (vLLM: ``{"ignore_eos": True}``).

    Returns:
        the requests' timings and the window's duration. Failed requests are among the timings, never left out.
    """
    return asyncio.run(_replay(url, model, trace, prompt_of, timeout_s, dict(extra_body or {})))


async def _replay(url: str, model: str, trace: Trace, prompt_of: Callable[[TraceRequest], str], timeout_s: float,
                  extra_body: dict[str, Any]) -> Replay:
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=httpx.Timeout(timeout_s)) as client:
        start = time.perf_counter()

        async def send(request: TraceRequest) -> RequestTiming:
            body = {"model": model, "prompt": prompt_of(request), "max_tokens": request.output_tokens,
                    "stream": True, "stream_options": {"include_usage": True}, "temperature": 0.0, **extra_body}
            return await _timed(client, body, request, start, timeout_s)

        if trace.arrivals.closed:
            timings = await _closed_loop(trace, send)
        else:
            timings = await _open_loop(trace, send, start)
        duration = time.perf_counter() - start
    return Replay(tuple(sorted(timings, key=lambda t: t.index)), duration)


async def _open_loop(trace: Trace, send: Callable[[TraceRequest], Any], start: float) -> list[RequestTiming]:
    tasks = []
    for request in trace.requests:
        delay = start + request.arrival_s - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(send(request)))
    return list(await asyncio.gather(*tasks))


async def _closed_loop(trace: Trace, send: Callable[[TraceRequest], Any]) -> list[RequestTiming]:
    pending = iter(trace.requests)
    timings: list[RequestTiming] = []

    async def client() -> None:
        for request in pending:  # one shared iterator: each request goes to the first client that is free
            timings.append(await send(request))

    await asyncio.gather(*(client() for _ in range(trace.arrivals.concurrency)))
    return timings


async def _timed(client: httpx.AsyncClient, body: dict[str, Any], request: TraceRequest, start: float,
                 timeout_s: float) -> RequestTiming:
    chunks: list[float] = []
    usage: dict[str, Any] = {}
    sent = time.perf_counter() - start
    try:
        error = await asyncio.wait_for(_stream(client, body, start, chunks, usage), timeout_s)
    except asyncio.TimeoutError:
        error = f"no end within {timeout_s:g} s ({len(chunks)} chunks with text by then)"
    except httpx.HTTPError as failure:
        error = f"{type(failure).__name__}: {failure}" if str(failure) else type(failure).__name__
    except ValueError as failure:  # a data line that is not JSON
        error = f"a stream line that is not JSON ({failure})"
    return RequestTiming(request.index, sent, tuple(chunks), _count(usage, "prompt_tokens", request.prompt_tokens),
                         _count(usage, "completion_tokens", len(chunks)), error)


def _count(usage: Mapping[str, Any], key: str, otherwise: int) -> int:
    """The usage's token count ``key`` where it is a whole number >= 1, else ``otherwise``."""
    value = usage.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else otherwise


async def _stream(client: httpx.AsyncClient, body: dict[str, Any], start: float, chunks: list[float],
                  usage: dict[str, Any]) -> str | None:
    """Stream one completion, appending each chunk-with-text's arrival time to ``chunks`` and the usage to ``usage``;
    returns the error that ended it, None when it finished."""
    finished = False
    async with client.stream("POST", "/v1/completions", json=body) as response:
        if response.status_code != 200:
            text = (await response.aread()).decode(errors="replace")[:ERROR_BODY_CHARS]
            return f"HTTP {response.status_code}: {' '.join(text.split())}"
        async for line in response.aiter_lines():
            now = time.perf_counter() - start
            if not line.startswith("data:"):
                continue
            payload = line[len("data:"):].strip()
            if payload == "[DONE]":
                break
            event = json.loads(payload)
            if event.get("error") and not event.get("choices"):  # transformers serve's failed generation
                return f"the server's stream reported: {str(event['error'])[:ERROR_BODY_CHARS]}"
            choice = (event.get("choices") or [{}])[0]
            if choice.get("text"):
                chunks.append(now)
            finished = finished or bool(choice.get("finish_reason"))
            usage.update(event.get("usage") or {})
    if not finished:
        return "the stream ended before its finish_reason"
    return None if chunks else "the stream finished without any text"
