"""Accuracy parity on real data (scikit-learn's handwritten digits) and output parity of every zoo model
against the CPU fp32 reference."""

import pytest


@pytest.mark.parity
def test_digits_accuracy(hwbench, device, dtype, cpu_digits_accuracy):
    record = hwbench.measure("parity", device=device, dtype=dtype, cpu_accuracy=cpu_digits_accuracy)
    assert record.accuracy >= 0.90, f"digits accuracy {record.accuracy:.4f} on {device} is below the 0.90 floor"


@pytest.mark.parity
def test_output_parity(hwbench, device, workload, dtype):
    hwbench.measure("output-parity", device=device, workload=workload, dtype=dtype)
