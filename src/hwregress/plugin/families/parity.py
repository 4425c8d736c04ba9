"""The ``parity`` family: accuracy parity on real data: the digits CNN trained on scikit-learn's handwritten digits,
its accuracy judged against the baseline and, off the CPU, against the CPU's accuracy in the same session."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from hwregress.measure import parity
from hwregress.plugin.context import BenchContext
from hwregress.plugin.matrix import Selection
from hwregress.plugin.tier_costs import Cost, CostModel
from hwregress.store.assembly import put_measured
from hwregress.store.baseline_file import entry_key
from hwregress.store.measured import MeasuredFigures
from hwregress.store.results import TestRecord


class Parity:
    """The ``parity`` family (:class:`hwregress.plugin.families.protocol.Family`)."""

    name = "parity"
    marker = "parity"
    marker_help = "accuracy or output parity against the CPU fp32 reference"
    requires: frozenset[str] = frozenset()
    sub_records: tuple[str, ...] = ()
    view = "parity"

    def cases(self, selection: Selection) -> list[dict[str, Any]]:
        """Device x dtype."""
        return [{"device": device, "dtype": d} for device in selection.devices for d in selection.dtypes]

    def measure(self, bench: BenchContext, *, device: str, dtype: str, cpu_accuracy: Callable[[], float]) -> TestRecord:
        """Train the digits CNN on ``device``; judge accuracy against the baseline and, off the CPU, against
        ``cpu_accuracy()``, the CPU's accuracy in this session."""
        record = bench.start(self.name, device, "digits_cnn", "train", parity.DIGITS_BATCH, dtype)
        put_measured(record, MeasuredFigures(unit="accuracy"))
        started = time.perf_counter()
        accuracy = parity.train_digits(device, dtype)
        put_measured(record, MeasuredFigures(accuracy=accuracy, duration_s=time.perf_counter() - started))
        failures = []
        if not device.startswith("cpu"):
            reference = cpu_accuracy()
            put_measured(record, MeasuredFigures(reference_accuracy=reference))
            margin = bench.session.policy.tolerances.device_accuracy_margin
            if abs(accuracy - reference) > margin:
                failures.append(f"{record.test_id}: digits accuracy {accuracy:.4f} on {device} differs from the "
                                f"CPU's {reference:.4f} by more than {margin:.3f}")
        return bench.conclude(record, entry_key(self.name, "digits_cnn", "train", parity.DIGITS_BATCH, dtype),
                              failures)

    def estimated_cost(self, case: dict[str, Any], cost: CostModel) -> Cost:
        """The digits training on the device; off the CPU, the CPU's accuracy once per session, untimed."""
        return cost.digits(case["device"])


FAMILY = Parity()
