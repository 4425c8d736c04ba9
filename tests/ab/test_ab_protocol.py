"""The A/B worker protocol (hwregress.ab.protocol): JSON lines both ways; a malformed line is one ProtocolError that
names who sent it and quotes the line, whatever its bytes."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hwregress.ab.protocol import Case, ProtocolError, decode_request, decode_response, encode

WORKER = "worker B (/venv/bin/python)"


def test_a_request_goes_through_a_line_and_back():
    case = Case("resnet18", "train", 8, device="cuda:0", dtype="bf16", warmup_steps=5, cudnn_benchmark=False, seed=3)
    line = encode({"op": "prepare", "case": case.to_dict()})
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert decode_request(line)["case"] == case
    assert decode_request(encode({"op": "window", "steps": 20})) == {"op": "window", "steps": 20}
    assert decode_request(encode({"op": "hello", "env_keys": ["A"]}))["env_keys"] == ["A"]


def test_a_case_needs_only_model_mode_and_batch_size():
    assert Case.from_dict({"model": "m", "mode": "infer", "batch_size": 1}) == Case("m", "infer", 1)


@pytest.mark.parametrize(("case", "named"), [
    ({"model": "m", "mode": "train"}, "['batch_size'] are missing"),
    ({"model": "m", "mode": "train", "batch_size": 2, "compiler": "inductor"}, "['compiler'] are unknown"),
    ({"model": "m", "mode": "train", "batch_size": "2"}, "'batch_size' must be int"),
    ({"model": "m", "mode": "train", "batch_size": True}, "'batch_size' must be int"),
    ({"model": "m", "mode": "train", "batch_size": 0}, "batch size must be >= 1"),
    ({"model": "m", "mode": "train", "batch_size": 2, "context": 1.5}, "'context' must be int | None"),
    ([1], "must be a JSON object"),
], ids=["missing", "unknown", "string", "bool", "zero", "float", "list"])
def test_a_bad_case_is_a_protocol_error_naming_the_field_and_quoting_the_line(case, named):
    line = json.dumps({"op": "prepare", "case": case})
    with pytest.raises(ProtocolError) as raised:
        decode_request(line, "the orchestrator")
    assert named in str(raised.value) and "the orchestrator" in str(raised.value) and line[:40] in str(raised.value)


@pytest.mark.parametrize(("line", "named"), [
    (b"not json", "is not JSON"),
    (b"[1, 2]", "is not a JSON object"),
    (b'{"op": "sing"}', "unknown op 'sing'"),
    (b'{"op": "window"}', "without a step count"),
    (b'{"op": "window", "steps": 0}', "without a step count"),
    (b'{"op": "hello", "env_keys": "A"}', "env_keys is not a list of strings"),
])
def test_a_malformed_request_names_the_sender_and_quotes_the_line(line, named):
    with pytest.raises(ProtocolError) as raised:
        decode_request(line, "the orchestrator")
    assert named in str(raised.value) and "the orchestrator" in str(raised.value)
    assert repr(line)[:20] in str(raised.value)


@pytest.mark.parametrize(("line", "named"), [
    (b"\xff\xfe", "is not JSON"),
    (b"a library printed this", "is not JSON"),
    (b'{"seconds": 1}', "without a true or false 'ok'"),
    (b'{"ok": false}', "without 'error' and 'traceback' strings"),
])
def test_a_malformed_response_names_the_worker_and_quotes_the_line(line, named):
    with pytest.raises(ProtocolError) as raised:
        decode_response(line, WORKER)
    assert named in str(raised.value) and WORKER in str(raised.value) and repr(line)[:10] in str(raised.value)


def test_a_value_json_cannot_carry_is_refused_on_encoding():
    with pytest.raises(ValueError):
        encode({"ok": True, "seconds": float("nan")})


@given(st.binary(max_size=300))
def test_any_bytes_as_a_response_decode_or_are_one_protocol_error(line):
    try:
        response = decode_response(line, WORKER)
    except ProtocolError as error:
        assert WORKER in str(error)
    else:
        assert isinstance(response["ok"], bool)


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                       max_size=4),
                           max_leaves=12)
CASES = st.dictionaries(st.sampled_from(["model", "mode", "batch_size", "device", "dtype", "context", "warmup_steps",
                                         "cudnn_benchmark", "seed", "compiler"]), JSON_VALUES)
REQUESTS = JSON_VALUES | st.builds(lambda op, rest: {**rest, "op": op}, st.sampled_from(["hello", "prepare", "window",
                                                                                          "close", "sing"]),
                                   st.dictionaries(st.sampled_from(["steps", "case", "env_keys", "workload_modules"]),
                                                   JSON_VALUES | CASES))


@given(REQUESTS)
def test_any_json_as_a_request_decodes_or_is_one_protocol_error(value):
    try:
        request = decode_request(json.dumps(value), "the orchestrator")
    except ProtocolError as error:
        assert "the orchestrator" in str(error)
    else:
        assert request["op"] in ("hello", "prepare", "window", "close")
        assert request["op"] != "prepare" or isinstance(request["case"], Case)
