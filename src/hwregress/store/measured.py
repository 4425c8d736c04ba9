"""What one test measured, as a frozen value: the stage between a family's window and the test's record.

A family builds one :class:`MeasuredFigures` from its window (a model window's through
:func:`hwregress.measure.record.window_figures`, a job's ranks, a Spark pipeline, an A/B pair of workers) and hands it
to the assembler (:func:`hwregress.store.assembly.put_measured`), the one place a record's fields are written. The
judge then reads the assembled record; what it concludes goes on through the same assembler
(:func:`hwregress.store.assembly.put_conclusion`).

Each field has the name, unit and meaning of the :class:`hwregress.store.results.TestRecord` field it fills (see
that class for both); None (or an empty sequence or mapping) means "not measured here" and leaves the record's own
value, so that the identity a test started with (its batch size, its unit) stays unless the family measured
another. ``details``, ``environment`` and ``identity`` add to the record's mappings of the same name. ``declared``
holds the values of metrics a project declares (:func:`hwregress.store.metrics.register`), by the metric's name, in
the metric's unit; the assembler makes each the record's :class:`hwregress.store.figures.DeclaredFigures`. Whether
the device throttled is not a figure of its own: the assembler reads it from the telemetry's ``throttle_reasons``.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hwregress.store.ab_figures import ABFigures
from hwregress.store.figures import (
    AllreduceFigures,
    ColocatedFigures,
    CompileFigures,
    LlmFigures,
    LookFigures,
    ScalingFigures,
    SparkFigures,
)
from hwregress.store.serving_figures import ServingFigures


@dataclass(frozen=True)
class MeasuredFigures:
    """One test's measured figures (see the module docstring); built once, never changed: derive another with
    :func:`dataclasses.replace` or :meth:`with_details`. Sequences are kept as tuples and mappings read-only."""

    unit: str | None = None
    batch_size: int | None = None
    samples: Sequence[float] = ()
    throughput: float | None = None
    throughput_iqr: float | None = None
    rounds: int | None = None
    steps_per_round: int | None = None
    latency_ms: float | None = None
    peak_memory_bytes: int | None = None
    stable: bool | None = None
    looks: LookFigures | None = None
    accuracy: float | None = None
    reference_accuracy: float | None = None
    speedup: float | None = None
    efficiency: float | None = None
    reference_samples: Sequence[float] = ()
    telemetry: Mapping[str, Any] | None = None
    health: Mapping[str, Any] = field(default_factory=dict)
    energy_j_per_sample: float | None = None
    samples_per_joule: float | None = None
    top_ops: Sequence[Mapping[str, Any]] = ()
    top_cpu_ops: Sequence[Mapping[str, Any]] = ()
    op_categories: Mapping[str, float] = field(default_factory=dict)
    flops_per_sample: float | None = None
    achieved_tflops: float | None = None
    mfu: float | None = None
    arithmetic_intensity: float | None = None
    trace_path: str | None = None
    duration_s: float | None = None
    compile: CompileFigures | None = None
    scaling: ScalingFigures | None = None
    allreduce: AllreduceFigures | None = None
    colocated: ColocatedFigures | None = None
    spark: SparkFigures | None = None
    serving: ServingFigures | None = None
    llm: LlmFigures | None = None
    ab: ABFigures | None = None
    declared: Mapping[str, float] = field(default_factory=dict)
    details: Mapping[str, Any] = field(default_factory=dict)
    environment: Mapping[str, Any] = field(default_factory=dict)
    identity: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in SEQUENCE_FIELDS:
            object.__setattr__(self, name, tuple(getattr(self, name)))
        for name in MAPPING_FIELDS:
            value = getattr(self, name)
            if value is not None and not isinstance(value, types.MappingProxyType):
                object.__setattr__(self, name, types.MappingProxyType(dict(value)))

    def with_details(self, **facts: Any) -> MeasuredFigures:
        """This measurement with ``facts`` added to its details (a key given again takes the new value)."""
        return dataclasses.replace(self, details={**self.details, **facts})


def energy_figures(energy_j: float | None, samples: float) -> dict[str, float]:
    """``energy_j_per_sample`` (J) and ``samples_per_joule`` of a window whose devices took ``energy_j`` joules for
    ``samples`` samples, as :class:`MeasuredFigures` fields; none where no energy was reported (None or 0: a CPU) or
    the window had no samples."""
    if not energy_j or not samples:
        return {}
    return {"energy_j_per_sample": energy_j / samples, "samples_per_joule": samples / energy_j}


SEQUENCE_FIELDS = ("samples", "reference_samples", "top_ops", "top_cpu_ops")
MAPPING_FIELDS = ("telemetry", "health", "op_categories", "declared", "details", "environment", "identity")
MERGED_FIELDS = ("details", "environment", "identity")
"""The fields whose mappings add to the record's own instead of replacing them."""
MEASURED_FIELDS = tuple(f.name for f in dataclasses.fields(MeasuredFigures))
