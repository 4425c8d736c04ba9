"""Accuracy parity on the real digits data and output parity of models."""

from __future__ import annotations

import pytest

from hwregress import workloads
from hwregress.measure import parity


def test_digits_split_is_real_and_fixed():
    train_x, _, test_x, test_y = parity.digits_split()
    assert train_x.shape[1:] == (1, 8, 8) and len(train_x) + len(test_x) == 1797
    assert float(train_x.max()) == 1.0 and set(test_y.tolist()) == set(range(10))
    assert (parity.digits_split()[3] == test_y).all()


def test_digits_training_is_accurate_and_reproducible():
    first = parity.train_digits("cpu", steps=150)
    assert first >= 0.90
    assert parity.train_digits("cpu", steps=150) == first


def test_output_parity_on_cpu_passes():
    result = parity.output_parity(workloads.get("mobilenet_v3_small"), "cpu", "fp32")
    assert result.ok and result.top1_agreement == 1.0 and result.relative_error <= 1e-6


def test_bf16_output_parity_is_judged_with_its_tolerance():
    result = parity.output_parity(workloads.get("resnet18"), "cpu", "bf16")
    assert result.tolerance == parity.OUTPUT_TOLERANCE["bf16"]
    assert 0 < result.relative_error < result.tolerance


def test_real_images_have_model_input_shape():
    images = parity.real_images(workloads.get("resnet18"), count=3)
    assert images.shape == (3, 3, 224, 224)
    assert float(images.mean()) == pytest.approx(0.0, abs=1e-5)
