"""An example hwregress workload plugin: registers ``example_mlp``, a small MLP over 1x28x28 inputs, 10 classes.

Importing this module registers the workload; the ``hwregress.workloads`` entry point in ``pyproject.toml``
makes the suite import it when the package is installed.
"""

from __future__ import annotations

from torch import nn

from hwregress.workloads import Workload, register

INPUT_SHAPE = (1, 28, 28)
NUM_CLASSES = 10
HIDDEN_FEATURES = 128


def build_example_mlp() -> nn.Module:
    """A fresh MLP with random weights on the CPU in fp32: ``[N, 1, 28, 28] -> [N, 10]`` logits."""
    in_features = INPUT_SHAPE[0] * INPUT_SHAPE[1] * INPUT_SHAPE[2]
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(in_features, HIDDEN_FEATURES),
        nn.ReLU(),
        nn.Linear(HIDDEN_FEATURES, NUM_CLASSES),
    )


# replace=True: importing by entry point and again by --workloads must not fail
register(Workload(name="example_mlp", build=build_example_mlp, input_shape=INPUT_SHAPE, num_classes=NUM_CLASSES),
         replace=True)
