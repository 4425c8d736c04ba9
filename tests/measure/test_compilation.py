"""The compilation axis on the CPU: backends, compile-time accounting, failures (hwregress.measure.compilation).

Most tests compile with dynamo's cheap ``"eager"`` backend (tracing only, no code generation) and pass
the suite backend label that decides error handling; only one test pays for a real inductor compile.
"""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path

import pytest
import torch
from torch import nn

from hwregress.measure import compilation
from hwregress.measure.compilation import (
    BACKENDS,
    MAX_ERROR_LINES,
    CompileFailed,
    CompileTiming,
    compile_model,
    unsupported_reason,
    warm_up_compiled,
)


@pytest.fixture(autouse=True)
def fresh_dynamo():
    compilation.reset()
    yield
    compilation.reset()


def tiny_mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def raising_backend(message: str):
    def backend(graph_module, example_inputs):
        raise RuntimeError(message)
    return backend


def test_eager_is_the_model_itself():
    model = tiny_mlp()
    assert compile_model(model, "eager") is model


def test_inductor_matches_eager_and_its_first_call_pays_the_compile():
    if reason := unsupported_reason("inductor", "cpu"):
        pytest.skip(reason)
    model = tiny_mlp().eval()
    inputs = torch.randn(4, 8)
    compiled = compile_model(model, "inductor")
    assert compiled is not model
    outputs: list[torch.Tensor] = []

    def step() -> None:
        with torch.inference_mode():
            outputs.append(compiled(inputs))

    timing = warm_up_compiled(step, "inductor", "cpu", steps=2)
    start = time.perf_counter()
    step()
    later_step_s = time.perf_counter() - start

    with torch.inference_mode():
        expected = model(inputs)
    assert all(torch.allclose(out, expected, rtol=1e-5, atol=1e-6) for out in outputs)
    assert timing.backend == "inductor"
    assert timing.recompiles == 1
    assert timing.compile_s == timing.first_step_s
    assert timing.compile_s > 10 * later_step_s


def test_compile_time_adds_the_calls_that_recompiled():
    compiled = torch.compile(tiny_mlp(), backend="eager")
    shapes = iter([(4, 8), (5, 8), (5, 8)])  # the second shape forces a recompile, the third reuses it
    ticks = iter([0.0, 10.0, 10.0, 11.5, 11.5, 12.0])  # first call 10 s, then 1.5 s, then 0.5 s

    timing = warm_up_compiled(lambda: compiled(torch.randn(*next(shapes))), "inductor", "cpu", steps=3,
                              clock=lambda: next(ticks))

    assert (timing.compile_s, timing.first_step_s, timing.recompiles) == (11.5, 10.0, 2)


def test_eager_counts_its_first_step_and_no_frames():
    model = tiny_mlp()
    ticks = itertools.count(0.0, 0.25)
    timing = warm_up_compiled(lambda: model(torch.randn(4, 8)), "eager", "cpu", steps=3, clock=lambda: next(ticks))
    assert timing == CompileTiming("eager", compile_s=0.25, first_step_s=0.25, recompiles=0)


def test_backend_failure_becomes_compile_failed_with_first_lines():
    compiled = torch.compile(tiny_mlp(), backend=raising_backend("boom\nline2"))
    with pytest.raises(CompileFailed) as caught:
        warm_up_compiled(lambda: compiled(torch.randn(4, 8)), "inductor", "cpu")
    failure = caught.value
    assert str(failure) == "compile with inductor failed: RuntimeError: boom\nline2"
    assert (failure.backend, failure.error_type, failure.first_lines) == ("inductor", "RuntimeError", ("boom", "line2"))
    assert isinstance(failure.__cause__, torch._dynamo.exc.BackendCompilerFailed)


def test_long_errors_keep_only_the_first_non_empty_lines():
    message = "\n\n".join(f"line{i}" for i in range(12))
    compiled = torch.compile(tiny_mlp(), backend=raising_backend(message))
    with pytest.raises(CompileFailed) as caught:
        warm_up_compiled(lambda: compiled(torch.randn(4, 8)), "cudagraphs", "cpu")
    text = str(caught.value)
    assert text.startswith("compile with cudagraphs failed: RuntimeError: line0\nline1")
    assert len(text.splitlines()) == MAX_ERROR_LINES
    assert "line5" not in text


class RaisesOutOfMemory(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


def test_out_of_memory_in_a_compiled_step_is_reraised_unchanged():
    compiled = torch.compile(RaisesOutOfMemory(), backend="eager")
    with pytest.raises(torch.OutOfMemoryError, match=r"Tried to allocate 2\.00 GiB"):
        warm_up_compiled(lambda: compiled(torch.randn(4, 8)), "inductor", "cpu")


def test_out_of_memory_inside_the_backend_compiler_is_unwrapped():
    def backend(graph_module, example_inputs):
        raise torch.OutOfMemoryError("CUDA out of memory while autotuning")

    compiled = torch.compile(tiny_mlp(), backend=backend)
    with pytest.raises(torch.OutOfMemoryError, match="while autotuning"):
        warm_up_compiled(lambda: compiled(torch.randn(4, 8)), "inductor-max-autotune", "cpu")


def test_eager_errors_propagate_unchanged():
    error = RuntimeError("shape mismatch")

    def step() -> None:
        raise error

    with pytest.raises(RuntimeError) as caught:
        warm_up_compiled(step, "eager", "cpu")
    assert caught.value is error


def test_unsupported_reasons():
    assert "CUDA" in unsupported_reason("cudagraphs", "cpu")
    assert unsupported_reason("eager", "cpu") is None
    assert unsupported_reason("eager", "cuda:3") is None


def test_inductor_on_cpu_needs_a_cxx_compiler(monkeypatch):
    monkeypatch.setattr(compilation.shutil, "which", lambda name: None)
    reason = unsupported_reason("inductor", "cpu")
    assert reason is not None and "C++ compiler" in reason
    monkeypatch.setattr(compilation.shutil, "which", lambda name: "/usr/bin/clang++" if name == "clang++" else None)
    assert unsupported_reason("inductor-max-autotune", "cpu") is None


def test_inductor_on_cuda_needs_triton(monkeypatch):
    monkeypatch.setattr(compilation, "_triton_importable", lambda: False)
    reason = unsupported_reason("inductor", "cuda:0")
    assert reason is not None and "triton" in reason


def test_torch_without_compile_is_unsupported(monkeypatch):
    monkeypatch.delattr(torch, "compile")
    assert "torch.compile" in unsupported_reason("inductor", "cpu")
    with pytest.raises(RuntimeError, match=r"torch\.compile"):
        compile_model(tiny_mlp(), "inductor")


@pytest.mark.parametrize("call", [
    lambda: compile_model(nn.Linear(2, 2), "tensorrt"),
    lambda: unsupported_reason("tensorrt", "cpu"),
    lambda: warm_up_compiled(lambda: None, "tensorrt", "cpu"),
])
def test_unknown_backend_names_the_valid_ones(call):
    with pytest.raises(ValueError, match="tensorrt") as caught:
        call()
    assert all(name in str(caught.value) for name in BACKENDS)


def test_reset_forgets_compiled_graphs():
    compiled = torch.compile(tiny_mlp(), backend="eager")

    def step() -> None:
        compiled(torch.randn(4, 8))

    assert warm_up_compiled(step, "inductor", "cpu", cache="warm").recompiles == 1
    assert warm_up_compiled(step, "inductor", "cpu", cache="warm").recompiles == 0
    compilation.reset()
    assert warm_up_compiled(step, "inductor", "cpu", cache="warm").recompiles == 1


# -- compile-time honesty: a cold compile_s is a cold cache ---------------------------------------------------
CACHE_HITS = (("inductor", "fxgraph_cache_hit"), ("aot_autograd", "autograd_cache_hit"))


def cache_hits_so_far() -> int:
    """FX graph and AOTAutograd cache hits this process has counted (torch's own counters, read directly)."""
    from torch._dynamo.utils import counters

    return sum(int(counters[group][name]) for group, name in CACHE_HITS)


def compile_like_the_suite(model: nn.Module, inputs: torch.Tensor) -> tuple[CompileTiming, int]:
    """What ``hwregress.measure.window`` does for one compiled test, and the cache hits torch counted meanwhile."""
    compilation.reset()
    compiled = compile_model(model, "inductor")

    def step() -> None:
        with torch.inference_mode():
            compiled(inputs)

    hits_before = cache_hits_so_far()
    timing = warm_up_compiled(step, "inductor", "cpu", steps=1)
    return timing, cache_hits_so_far() - hits_before


def test_compiling_the_same_model_twice_in_one_process_is_cold_both_times():
    if reason := unsupported_reason("inductor", "cpu"):
        pytest.skip(reason)
    model, inputs = tiny_mlp().eval(), torch.randn(4, 8)

    first, _ = compile_like_the_suite(model, inputs)
    second, hits = compile_like_the_suite(model, inputs)

    assert hits == 0  # the original code hit the FX graph and AOTAutograd caches the first compile had filled
    assert first.cache_state == second.cache_state == "cold"
    assert second.cache_counts["fxgraph_cache_hit"] == second.cache_counts["autograd_cache_hit"] == 0
    assert second.cache_counts["fxgraph_cache_miss"] >= 1


def test_a_cold_compile_uses_a_fresh_cache_folder_and_restores_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    compiled = torch.compile(tiny_mlp(), backend="eager")
    seen: dict[str, str | None] = {}

    def step() -> None:
        seen.update({name: os.environ.get(name) for name in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")})
        compiled(torch.randn(4, 8))

    timing = warm_up_compiled(step, "inductor", "cpu")

    fresh = Path(seen["TORCHINDUCTOR_CACHE_DIR"] or "")
    assert fresh != tmp_path / "mine" and fresh.name.startswith("hwregress-compile-")
    assert seen["TRITON_CACHE_DIR"] == str(fresh / "triton")
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "mine")
    assert "TRITON_CACHE_DIR" not in os.environ
    assert not fresh.exists()  # removed after the compile
    assert timing.cache_state == "cold" and timing.recompiles == 1


def test_a_failed_cold_compile_restores_the_environment_too(monkeypatch, tmp_path):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    compiled = torch.compile(tiny_mlp(), backend=raising_backend("boom"))
    with pytest.raises(CompileFailed):
        warm_up_compiled(lambda: compiled(torch.randn(4, 8)), "inductor", "cpu")
    assert os.environ["TRITON_CACHE_DIR"] == str(tmp_path / "triton")


def test_a_cold_compile_forgets_what_dynamo_compiled_before():
    compiled = torch.compile(tiny_mlp(), backend="eager")

    def step() -> None:
        compiled(torch.randn(4, 8))

    assert warm_up_compiled(step, "inductor", "cpu").recompiles == 1
    assert warm_up_compiled(step, "inductor", "cpu").recompiles == 1  # compiled afresh, not served from dynamo's cache


def test_a_cache_hit_during_a_cold_compile_makes_it_warm():
    """A fresh local folder does not rule out a remote cache (``fx_graph_remote_cache``): the counters decide."""
    from torch._dynamo.utils import counters

    def step() -> None:
        counters["inductor"]["fxgraph_cache_hit"] += 1

    timing = warm_up_compiled(step, "inductor", "cpu", steps=1)
    assert timing.cache_state == "warm" and timing.cache_counts["fxgraph_cache_hit"] == 1


def test_a_warm_compile_keeps_the_caches_and_says_so(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    compiled = torch.compile(tiny_mlp(), backend="eager")
    seen = []

    def step() -> None:
        seen.append(os.environ["TORCHINDUCTOR_CACHE_DIR"])
        compiled(torch.randn(4, 8))

    timing = warm_up_compiled(step, "inductor", "cpu", steps=1, cache="warm")
    assert seen == [str(tmp_path / "mine")] and timing.cache_state == "warm"


def test_eager_has_no_cache_state():
    timing = warm_up_compiled(lambda: None, "eager", "cpu")
    assert timing.cache_state is None and timing.cache_counts == {}


def test_an_unknown_cache_state_names_the_valid_ones():
    with pytest.raises(ValueError, match=r"'lukewarm'.*cold, warm"):
        warm_up_compiled(lambda: None, "inductor", "cpu", cache="lukewarm")


def test_the_compilers_one_time_set_up_is_paid_once_per_backend_and_device_before_any_measured_compile(monkeypatch):
    monkeypatch.setattr(compilation, "_PRIMED", set())
    compiled_with: list[str] = []

    def cheap_compile(model: nn.Module, backend: str) -> nn.Module:  # dynamo's tracing-only backend: no code generation
        compiled_with.append(backend)
        return torch.compile(model, backend="eager")

    monkeypatch.setattr(compilation, "compile_model", cheap_compile)
    ticks = itertools.count(0.0, 1.5)

    assert compilation.prime_compiler("inductor", "cpu", clock=lambda: next(ticks)) == 1.5
    assert compilation.prime_compiler("inductor", "cpu") is None  # once per process
    assert compilation.prime_compiler("eager", "cpu") is None
    assert compilation.prime_compiler("inductor-max-autotune", "cpu") is not None  # each backend has its own set-up
    assert compiled_with == ["inductor", "inductor-max-autotune"]


def test_a_failing_priming_compile_is_left_to_the_measured_compile_to_report(monkeypatch):
    monkeypatch.setattr(compilation, "_PRIMED", set())
    monkeypatch.setattr(compilation, "compile_model",
                        lambda model, backend: torch.compile(model, backend=raising_backend("broken compiler")))
    assert compilation.prime_compiler("inductor", "cpu") is not None
    assert compilation.prime_compiler("inductor", "cpu") is None  # not retried for every test
