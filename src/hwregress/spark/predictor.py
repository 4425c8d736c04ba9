"""What the ``spark`` family predicts and how: rows of real handwritten digits, and one predict function used
both by Spark's ``predict_batch_udf`` on the executors and by the plain-torch reference in the driver, so the
two differ only by Spark.

A row carries one digit of ``sklearn.datasets.load_digits()`` (8x8 grey levels 0-16, as 64 float32 in [0, 1])
and its id; the predict function upsamples it (bilinear) to the model's input, repeats it over the channels and
standardizes it with the data set's mean and standard deviation, as the parity tests do
(:func:`hwregress.measure.parity.real_images`), then runs the model and returns the top-1 class and its logit. The
upsampling runs on the executor's device, like the decoding of a compressed image: shipping 600 KB float rows
(3x224x224) through Arrow would measure copies that exist only because the data set is small.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from hwregress import workloads
from hwregress.hardware.facts import device_kind
from hwregress.measure.precision.numerics import precision

DIGIT_SIDE = 8
DIGIT_PIXELS = DIGIT_SIDE * DIGIT_SIDE
SEED = 0  # model weights: the same seeded build on every executor and in the driver


@functools.lru_cache(maxsize=1)
def _digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    digits = load_digits()
    pixels = (digits.images.reshape(len(digits.images), DIGIT_PIXELS) / 16.0).astype(np.float32)
    return pixels, digits.target.astype(np.int32)


def digit_pixels(ids: Sequence[int] | np.ndarray) -> np.ndarray:
    """The pixels of rows ``ids`` (row i is digit ``i mod 1797``): ``[len(ids), 64]`` float32 in [0, 1]."""
    pixels, _ = _digits()
    return pixels[np.asarray(ids, dtype=np.int64) % len(pixels)]


def digit_rows(count: int) -> list[tuple[int, int, list[float], None]]:
    """``count`` rows of :func:`row_schema` (``written_at`` null): the 1,797 digits in order, repeated as often as
    needed."""
    pixels, labels = _digits()
    return [(i, int(labels[i % len(pixels)]), pixels[i % len(pixels)].tolist(), None) for i in range(count)]


@functools.lru_cache(maxsize=1)
def pixel_statistics() -> tuple[float, float]:
    """Mean and standard deviation of every pixel of the digits set, in [0, 1] units."""
    pixels, _ = _digits()
    return float(pixels.mean()), float(pixels.std())


@dataclass(frozen=True)
class PredictSpec:
    """Everything an executor needs to build the predict function: plain values only (it is pickled).

    Attributes:
        model: workload name (:func:`hwregress.workloads.get`).
        device: the device to predict on (``cpu``, ``cuda:N``); an executor that was given a GPU by Spark's
            resource scheduling uses that GPU instead.
        dtype: ``fp32``, ``tf32``, ``bf16`` or ``fp16`` (autocast).
        workload_modules: modules to import first (``--workloads``), so a workload of your own resolves.
        mean, std: the standardization of the inputs (:func:`pixel_statistics`).
    """

    model: str
    device: str
    dtype: str
    workload_modules: tuple[str, ...] = ()
    mean: float = 0.0
    std: float = 1.0


class Predictor:
    """A model on a device that maps digit rows to (top-1 class, top-1 logit).

    Raises:
        ValueError: the workload is not an image model.
    """

    def __init__(self, spec: PredictSpec, device: str | None = None, threads: int | None = None) -> None:
        for module in spec.workload_modules:
            __import__(module)
        workload = workloads.get(spec.model)
        if workload.input_kind != "images" or len(workload.input_shape) != 3:
            raise ValueError(f"the spark family predicts images; {spec.model!r} takes {workload.input_kind}")
        if threads is not None:
            torch.set_num_threads(max(1, threads))
        self.spec = spec
        self.device = device or spec.device
        self.input_shape = workload.input_shape
        torch.manual_seed(SEED)
        self.model = workload.build().eval().to(self.device)

    def __call__(self, pixels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Top-1 class (int32) and its logit (float32), each ``[N]``, for ``pixels`` ``[N, 64]``."""
        channels, height, width = self.input_shape
        with torch.inference_mode(), precision(self.device, self.spec.dtype):
            images = (torch.as_tensor(np.asarray(pixels, dtype=np.float32)).to(self.device)
                      .view(-1, 1, DIGIT_SIDE, DIGIT_SIDE))
            images = torch.nn.functional.interpolate(images, size=(height, width), mode="bilinear", align_corners=False)
            images = (images.repeat(1, channels, 1, 1) - self.spec.mean) / self.spec.std
            top = self.model(images).float().max(dim=1)
        return top.indices.to(torch.int32).cpu().numpy(), top.values.cpu().numpy()


def executor_device(spec: PredictSpec) -> str:
    """The device a Spark task predicts on: the GPU Spark's resource scheduling gave the task
    (``spark.task.resource.gpu.amount``: ``TaskContext.get().resources()["gpu"].addresses``, index strings, as
    pyspark/taskcontext.py has them), else the spec's device: in local mode a task is given no GPU (Spark's
    ``LocalSchedulerBackend`` offers cores only), so the default ``local[1]`` of a GPU test runs its one Python
    worker on the device under test."""
    if device_kind(spec.device) != "cuda":
        return spec.device
    from pyspark import TaskContext

    context = TaskContext.get()
    addresses = context.resources().get("gpu").addresses if context and "gpu" in context.resources() else []
    return f"cuda:{addresses[0]}" if addresses else spec.device


def make_predict_fn(spec: PredictSpec) -> Callable[[], Callable[[np.ndarray], dict[str, np.ndarray]]]:
    """The ``make_predict_fn`` of ``pyspark.ml.functions.predict_batch_udf``: built once per Python worker (Spark's
    model cache), with as many torch threads as Spark gives each task (``spark.task.cpus``). Each batch returns
    ``prediction`` (int32), ``logit`` (float32) and ``predicted_at`` (Unix time in s, float64, taken after the
    batch's prediction finished)."""
    def make() -> Callable[[np.ndarray], dict[str, np.ndarray]]:
        from pyspark import TaskContext

        context = TaskContext.get()
        predictor = Predictor(spec, device=executor_device(spec), threads=context.cpus() if context else None)

        def predict(pixels: np.ndarray) -> dict[str, np.ndarray]:
            classes, logits = predictor(pixels)
            return {"prediction": classes, "logit": logits, "predicted_at": np.full(len(classes), time.time())}

        return predict

    return make


def predict_udf(spec: PredictSpec, batch_size: int):  # -> pyspark Column function
    """The family's UDF: ``pyspark.ml.functions.predict_batch_udf`` over a 64-float ``pixels`` column, ``batch_size``
    rows per model call, returning the struct ``prediction, logit, predicted_at``."""
    from pyspark.ml.functions import predict_batch_udf
    from pyspark.sql import types

    result = types.StructType([types.StructField("prediction", types.IntegerType()),
                               types.StructField("logit", types.FloatType()),
                               types.StructField("predicted_at", types.DoubleType())])
    return predict_batch_udf(make_predict_fn(spec), return_type=result, batch_size=batch_size,
                             input_tensor_shapes=[[DIGIT_PIXELS]])


def row_schema():  # -> pyspark StructType
    """The schema of a digit row: ``id`` (long), ``label`` (int), ``pixels`` (64 floats), ``written_at`` (double,
    the Unix time a streamed image became visible; null in the batch data set)."""
    from pyspark.sql import types

    return types.StructType([types.StructField("id", types.LongType(), False),
                             types.StructField("label", types.IntegerType(), False),
                             types.StructField("pixels", types.ArrayType(types.FloatType(), False), False),
                             types.StructField("written_at", types.DoubleType(), True)])
