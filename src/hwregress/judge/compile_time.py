"""A compiled model's compile time against its baseline entry's: compared, never judged, and only with one of the
same cache state. Split from :func:`hwregress.judge.compare.judge`, whose judged figures carry the comparison."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hwregress.store.figures import CompileComparison


def compare_compile(compile_s: float, cache: str | None, baseline: Mapping[str, Any]) -> dict[str, Any] | None:
    """``compile_s`` (seconds, measured with a ``cache`` state of :data:`hwregress.measure.compilation.CACHE_STATES`)
    against the baseline entry's ``compile_s`` (the median of its sessions of state ``compile_cache``).

    A compile that found its work in a cache takes a fraction of one that did not (a tiny MLP under inductor on the
    CPU: 24.6 s cold, 0.09 s warm), so a warm and a cold compile time are never compared, nor one whose state is
    unknown (an entry recorded before states were kept).

    Returns:
        None when the baseline holds no compile time; else ``{"compared": True, "cache", "baseline_compile_s",
        "ratio"}`` (ratio = compile_s / baseline_compile_s, above 1 is slower) or ``{"compared": False, "cache",
        "baseline_cache", "reason"}``.
    """
    base_compile_s = baseline.get("compile_s")
    if not base_compile_s:
        return None
    base_cache = baseline.get("compile_cache")
    if cache is None or cache != base_cache:
        return {"compared": False, "cache": cache, "baseline_cache": base_cache,
                "reason": f"compile time not compared: this session compiled with {_cache_words(cache)}, the "
                          f"baseline's with {_cache_words(base_cache, own=False)} (a warm and a cold compile are "
                          "not comparable); record a baseline of the same cache state with --update-baselines"}
    return {"compared": True, "cache": cache, "baseline_compile_s": base_compile_s, "ratio": compile_s / base_compile_s}


def _cache_words(cache: str | None, own: bool = True) -> str:
    if cache is None:
        return "an unknown cache" if own else "an unknown one"
    return f"a {cache} cache" if own else f"a {cache} one"


def compile_time_figures(compile_s: float, cache: str | None,
                         baseline: Mapping[str, Any]) -> tuple[CompileComparison | None, list[str]]:
    """:func:`compare_compile` of ``compile_s`` (seconds) as the record's figures (None where the baseline holds no
    compile time), and the notes to show beside the verdict: why it was not compared, or none."""
    comparison = compare_compile(compile_s, cache, baseline)
    if comparison is None:
        return None, []
    return CompileComparison.of(comparison), [] if comparison["compared"] else [comparison["reason"]]
