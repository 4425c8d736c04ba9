"""Every typed sub-record of :class:`hwregress.store.results.TestRecord`, by its field's name."""

from __future__ import annotations

from hwregress.store.ab_figures import ABFigures
from hwregress.store.figures import (
    AllreduceFigures,
    ColocatedFigures,
    CompileFigures,
    DeclaredFigures,
    Figures,
    LlmFigures,
    LookFigures,
    ReachFigures,
    ScalingFigures,
    SparkFigures,
)
from hwregress.store.serving_figures import ServingFigures

SUB_RECORDS: dict[str, type[Figures]] = {
    "scaling": ScalingFigures, "allreduce": AllreduceFigures, "colocated": ColocatedFigures, "spark": SparkFigures,
    "serving": ServingFigures, "llm": LlmFigures, "compile": CompileFigures, "looks": LookFigures,
    "reach": ReachFigures, "latency_reach": ReachFigures, "efficiency_reach": ReachFigures,
    "speedup_reach": ReachFigures, "ab": ABFigures}
"""The record's sub-record fields by name, each its class."""
LIST_SUB_RECORDS: dict[str, type[Figures]] = {"declared": DeclaredFigures}
"""The record's fields that hold a list of sub-records, by name, each its items' class."""
