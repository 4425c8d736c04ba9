"""The ``output-parity`` family: every selected model's outputs on a device in a dtype against the CPU fp32 reference
(top-1 agreement, relative error within the dtype's tolerance, no non-finite logits). Its tests carry the ``parity``
marker and a ``workload``.

The CPU references are kept in this process while the family's tests follow one another and dropped after its last
(:meth:`OutputParity.pytest_runtest_teardown`): the last model's (5 GB of host memory for llama_1b) must not stay in
memory under the windows of the families that follow."""

from __future__ import annotations

from typing import Any

import pytest

from hwregress import workloads
from hwregress.measure import parity
from hwregress.measure.out_of_memory import OutOfMemory
from hwregress.measure.precision.quantization import QuantizationUnsupported
from hwregress.plugin.context import BenchContext
from hwregress.plugin.matrix import Selection, models_for
from hwregress.plugin.record import skip_with
from hwregress.plugin.tier_costs import Cost, CostModel
from hwregress.store.assembly import put_measured
from hwregress.store.baseline_file import entry_key
from hwregress.store.measured import MeasuredFigures
from hwregress.store.results import TestRecord
from hwregress.store.verdicts import Verdict

CPU_REFERENCES_KEY = pytest.StashKey[parity.CpuReferences]()


class OutputParity:
    """The ``output-parity`` family (:class:`hwregress.plugin.families.protocol.Family`), and the pytest hook that
    drops its CPU references."""

    name = "output-parity"
    marker = "parity"
    marker_help = "accuracy or output parity against the CPU fp32 reference"
    requires = frozenset({"workload"})
    sub_records: tuple[str, ...] = ()
    view = "parity"

    def cases(self, selection: Selection) -> list[dict[str, Any]]:
        """Device x model (of a tier, the models it names for output parity) x dtype."""
        return [{"device": device, "workload": m, "dtype": d} for device in selection.devices
                for m in models_for(selection, device, self.name) for d in selection.dtypes]

    def measure(self, bench: BenchContext, *, device: str, workload: str, dtype: str) -> TestRecord:
        """Compare ``workload``'s outputs on ``device`` in ``dtype`` with the CPU fp32 reference."""
        record = bench.start(self.name, device, workload, "infer", parity.PARITY_SAMPLES, dtype)
        put_measured(record, MeasuredFigures(unit="top-1 agreement"))
        references = bench.config.stash.setdefault(CPU_REFERENCES_KEY, parity.CpuReferences())
        try:
            result = parity.output_parity(workloads.get(workload), device, dtype, references=references)
        except OutOfMemory as error:  # as throughput ends it: the session goes on
            skip_with(Verdict.OOM, str(error))
        except QuantizationUnsupported as error:
            skip_with(Verdict.UNSUPPORTED, str(error))
        put_measured(record, MeasuredFigures(accuracy=result.top1_agreement, details={
            "relative_error": result.relative_error, "max_abs_error": result.max_abs_error,
            "tolerance": result.tolerance, "decisive_agreement": result.decisive_agreement,
            "nonfinite_logits": result.nonfinite, "reference_nonfinite_logits": result.reference_nonfinite}))
        failure = result.failure(device, dtype)
        failures = [f"{record.test_id}: {failure}"] if failure else []
        return bench.conclude(record, entry_key(self.name, workload, "infer", parity.PARITY_SAMPLES, dtype), failures)

    def estimated_cost(self, case: dict[str, Any], cost: CostModel) -> Cost:
        """The CPU reference once per model, the device's copy and its forward."""
        return cost.output_parity(case["workload"], case["dtype"], case["device"])

    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: pytest.Item | None) -> None:
        """Drop the CPU references when the next test is none of this family's."""
        if nextitem is None or not _is_mine(nextitem):
            if CPU_REFERENCES_KEY in item.config.stash:
                del item.config.stash[CPU_REFERENCES_KEY]


def _is_mine(item: pytest.Item) -> bool:
    return (item.get_closest_marker(OutputParity.marker) is not None
            and OutputParity.requires <= set(getattr(item, "fixturenames", ())))


FAMILY = OutputParity()
