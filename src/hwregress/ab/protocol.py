"""The messages between the A/B orchestrator and a stack's worker: JSON lines, one request and one response per line.

Requests::

    {"op": "hello", "device": "cuda:0", "env_keys": ["OMP_NUM_THREADS"], "workload_modules": []}
    {"op": "prepare", "case": {"model": "resnet18", "mode": "train", "batch_size": 32, ...}}   (see Case)
    {"op": "window", "steps": 20}
    {"op": "release"}          (drop the prepared case and return its device memory)
    {"op": "visit", "case": {...}, "rounds": 10, "min_round_s": 0.1, "telemetry_interval_s": 0.1}
                               (a whole window of the case as the test's own runs it: hwregress.measure.visits)
    {"op": "close"}

Responses: ``{"ok": true, ...}`` with the request's answer, or ``{"ok": false, "error": str, "traceback": str}``
(``"kind": "oom"`` when the error was an allocation failure). Torch-free.
"""

from __future__ import annotations

import json
import traceback
from dataclasses import asdict, dataclass, fields
from typing import Any

OPS = ("hello", "prepare", "window", "release", "visit", "close")
LINE_SHOWN = 200  # characters of a malformed line quoted in its error


class ProtocolError(ValueError):
    """A line that is not a message of this protocol; the message names who sent it and quotes the line."""


@dataclass(frozen=True)
class Case:
    """What a worker prepares: one model's step, as the project's windows build it
    (:func:`hwregress.measure.window.build_step`).

    Attributes:
        model: a registered workload name (``hwregress.workloads.get``).
        mode: ``train`` or ``infer`` (a visit's case also ``prefill`` or ``decode``).
        batch_size: inputs per step (> 0).
        device: the torch device spec, e.g. ``"cuda:0"``.
        dtype: ``fp32``, ``tf32``, ``bf16``, ``fp16``, ``int8`` or ``fp8``.
        context: tokens per sample of a text model (None: its ``seq_len``).
        warmup_steps: untimed steps when the case is prepared (the session's plan's).
        cudnn_benchmark: ``torch.backends.cudnn.benchmark`` in the worker (the session's setting).
        seed: the weights are drawn after ``torch.manual_seed(seed)`` and the batch with ``seed``, so both stacks
            run the same model on the same inputs.
    """

    model: str
    mode: str
    batch_size: int
    device: str = "cpu"
    dtype: str = "fp32"
    context: int | None = None
    warmup_steps: int = 3
    cudnn_benchmark: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.warmup_steps < 0:
            raise ValueError(f"case {self.model!r}: batch size must be >= 1 and warmup steps >= 0, got "
                             f"{self.batch_size} and {self.warmup_steps}")

    def to_dict(self) -> dict[str, Any]:
        """The case as a JSON-able dict (a ``prepare`` request's ``case``)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> Case:
        """The case ``data`` describes.

        Raises:
            ValueError: not an object, a required field missing, a field this hwregress does not know, or a field
                of the wrong type; the message names the field.
        """
        if not isinstance(data, dict):
            raise ValueError(f"a case must be a JSON object, got {type(data).__name__}")
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise ValueError(f"case fields {unknown} are unknown to this hwregress (it knows {sorted(known)}); "
                             "run the same hwregress in both stacks")
        missing = [name for name in ("model", "mode", "batch_size") if name not in data]
        if missing:
            raise ValueError(f"case fields {missing} are missing")
        for name, value in data.items():
            _check_type(name, value, known[name].type)
        return cls(**data)


_TYPES: dict[str, tuple[type, ...]] = {"str": (str,), "int": (int,), "bool": (bool,), "int | None": (int, type(None))}


def _check_type(name: str, value: Any, declared: Any) -> None:
    allowed = _TYPES[str(declared)]
    if (isinstance(value, bool) and bool not in allowed) or not isinstance(value, allowed):
        raise ValueError(f"case field {name!r} must be {declared}, got {value!r}")


def encode(message: dict[str, Any]) -> bytes:
    """One message as a JSON line (UTF-8, ending in a newline; no NaN or infinity).

    Raises:
        ValueError: the message holds a value JSON cannot carry (NaN, infinity, an object).
    """
    return (json.dumps(message, allow_nan=False, separators=(",", ":")) + "\n").encode("utf-8")


def _decoded(line: bytes | str, sender: str) -> dict[str, Any]:
    """The JSON object on ``line``.

    Raises:
        ProtocolError: not UTF-8, not JSON, or not an object; names ``sender`` and quotes the line.
    """
    shown = line[:LINE_SHOWN]
    try:
        message = json.loads(line)
    except (UnicodeDecodeError, ValueError) as error:
        raise ProtocolError(f"{sender} sent a line that is not JSON ({error}): {shown!r}") from None
    if not isinstance(message, dict):
        raise ProtocolError(f"{sender} sent a line that is not a JSON object: {shown!r}")
    return message


def decode_request(line: bytes | str, sender: str = "the orchestrator") -> dict[str, Any]:
    """A request line checked: ``op`` one of :data:`OPS`, ``window``'s ``steps`` an int >= 1, ``prepare``'s and
    ``visit``'s ``case`` a valid :class:`Case` (returned as a ``Case`` under ``"case"``), ``visit``'s ``rounds`` an int
    >= 3 and its ``min_round_s`` and ``telemetry_interval_s`` numbers > 0, ``hello``'s lists lists of strings.

    Raises:
        ProtocolError: a malformed line or request; names ``sender`` and quotes the line.
    """
    request = _decoded(line, sender)
    op = request.get("op")
    shown = line[:LINE_SHOWN]
    if op not in OPS:
        raise ProtocolError(f"{sender} sent an unknown op {op!r} (known: {', '.join(OPS)}): {shown!r}")
    if op == "window":
        steps = request.get("steps")
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ProtocolError(f"{sender} sent a window without a step count >= 1: {shown!r}")
    if op in ("prepare", "visit"):
        try:
            request["case"] = Case.from_dict(request.get("case"))
        except (TypeError, ValueError) as error:
            raise ProtocolError(f"{sender} sent a {op} request with a bad case ({error}): {shown!r}") from None
    if op == "visit":
        rounds = request.get("rounds")
        if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 3:
            raise ProtocolError(f"{sender} sent a visit without a round count >= 3: {shown!r}")
        for key in ("min_round_s", "telemetry_interval_s"):
            value = request.get(key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ProtocolError(f"{sender} sent a visit whose {key} is not a number > 0: {shown!r}")
    if op == "hello":
        for key in ("env_keys", "workload_modules"):
            value = request.get(key, [])
            if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
                raise ProtocolError(f"{sender} sent a hello whose {key} is not a list of strings: {shown!r}")
    return request


def decode_response(line: bytes | str, worker: str) -> dict[str, Any]:
    """A response line checked: ``ok`` true, or false with ``error`` and ``traceback`` strings.

    Raises:
        ProtocolError: a malformed line; names ``worker`` (e.g. ``"worker B (/venv/bin/python)"``) and quotes it.
    """
    response = _decoded(line, worker)
    ok = response.get("ok")
    if not isinstance(ok, bool):
        raise ProtocolError(f"{worker} sent a response without a true or false 'ok': {line[:LINE_SHOWN]!r}")
    if not ok and not (isinstance(response.get("error"), str) and isinstance(response.get("traceback"), str)):
        raise ProtocolError(f"{worker} sent a failure without 'error' and 'traceback' strings: {line[:LINE_SHOWN]!r}")
    return response


def failure(error: BaseException, kind: str = "error") -> dict[str, Any]:
    """The ``ok: false`` response for ``error``, raised and caught just now (its traceback is the current one)."""
    return {"ok": False, "error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc(),
            "kind": kind}
