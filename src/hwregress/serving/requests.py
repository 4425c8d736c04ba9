"""One streamed request's timestamps, as the client saw them, and what they give, with ``vllm bench serve``'s
definitions (``vllm/benchmarks/serve.py``, ``calculate_metrics``; ``vllm/benchmarks/lib/endpoint_request_func.py``):

- TTFT, time to first token: the first chunk with output minus the send;
- ITL, inter-token latency: the gap between two consecutive chunks with output (a chunk may carry several tokens);
- E2EL, end-to-end latency: the last chunk with output minus the send;
- TPOT, time per output token after the first: ``(E2EL - TTFT) / (output tokens - 1)``, for outputs of two tokens
  or more.

Times are seconds on the client's monotonic clock, counted from the window's start.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass


class RequestLogError(ValueError):
    """A request's timestamps that no client could have recorded; the message names the request and the value."""


@dataclass(frozen=True)
class RequestTiming:
    """What the client recorded of one request.

    Attributes:
        index: the trace request it replayed.
        sent_s: when it was sent (s after the window's start).
        chunk_times_s: when each streamed chunk with output arrived (s after the window's start), in order.
        prompt_tokens: its prompt's length (tokens).
        output_tokens: the tokens the server produced (its reported usage, else the chunks' count).
        error: why it failed (an HTTP status, a timeout, a broken stream), None when it completed.
    """

    index: int
    sent_s: float
    chunk_times_s: tuple[float, ...]
    prompt_tokens: int
    output_tokens: int
    error: str | None = None

    def __post_init__(self) -> None:
        times = (self.sent_s, *self.chunk_times_s)
        if not all(isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t) for t in times):
            raise RequestLogError(f"request {self.index}: times {times!r} are not all finite seconds")
        if any(b < a for a, b in itertools.pairwise(times)):
            raise RequestLogError(f"request {self.index}: times {times!r} go back (sent, then each chunk's arrival)")
        if self.output_tokens < 0 or self.prompt_tokens < 0:
            raise RequestLogError(f"request {self.index}: token counts {self.prompt_tokens} in, {self.output_tokens} "
                                  "out: counts are >= 0")
        if self.error is None and not (self.chunk_times_s and self.output_tokens >= 1):
            raise RequestLogError(f"request {self.index}: completed without output ({len(self.chunk_times_s)} "
                                  f"chunks, {self.output_tokens} tokens): record it with the error that ended it")

    @property
    def completed(self) -> bool:
        """Whether it ended with its output (no error)."""
        return self.error is None

    @property
    def ttft_s(self) -> float:
        """Time to first token, s."""
        return self.chunk_times_s[0] - self.sent_s

    @property
    def e2el_s(self) -> float:
        """End-to-end latency, s: to the last chunk with output."""
        return self.chunk_times_s[-1] - self.sent_s

    @property
    def itls_s(self) -> list[float]:
        """Each gap between consecutive chunks with output, s (one fewer than the chunks)."""
        return [b - a for a, b in itertools.pairwise(self.chunk_times_s)]

    @property
    def tpot_s(self) -> float | None:
        """Time per output token after the first, s; None for an output of fewer than two tokens."""
        if self.output_tokens < 2:
            return None
        return (self.e2el_s - self.ttft_s) / (self.output_tokens - 1)
