"""What the ``spark`` family's options decided, and its defaults per device kind."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from hwregress.hardware.facts import device_kind
from hwregress.spark import engine
from hwregress.spark.engine import EngineConfig
from hwregress.spark.master import local_slots

# rows of the batch data set: the 1,797 digits repeated to a few thousand, more where a pass is fast
DEFAULT_ROWS = {"cpu": 2048, "cuda": 16384, "mps": 4096}
# streamed images per second: well under what the engine sustains on that device kind
# (docs/measured.md, 'Spark stream rate'), so a healthy stream keeps up and its latency is the engine's, not a queue's
DEFAULT_RATE = {"cpu": 20.0, "cuda": 200.0, "mps": 100.0}
DEFAULT_STREAM_SECONDS = 15.0  # measured images = rate x this
# task slots of the default local master per GPU a test runs on: Spark's local mode gives a task no GPU address
# ("local mode doesn't support extra resources like GPUs right now", LocalSchedulerBackend.scala, LocalEndpoint),
# so every task, each in its own Python worker, predicts on the device under test
GPU_TASK_SLOTS = 1


def default_master(device: str) -> str:
    """The master of a test on ``device`` without ``--spark-master``: the CPU: ``local[cores]``, one task per core;
    a GPU: ``local[1]``, one task slot and so one Python worker on it (``local[cores]`` would put a worker per core,
    each with its own model and CUDA context, on the same GPU)."""
    return engine.default_master() if device_kind(device) == "cpu" else f"local[{GPU_TASK_SLOTS}]"


def shared_gpu_warning(master: str, devices: Iterable[str], source: str = "--spark-master") -> str | None:
    """A sentence for a ``master`` that puts several Python workers on each GPU a test runs on, None otherwise.

    Spark's local mode gives a task no GPU address (see :data:`GPU_TASK_SLOTS`), so every task slot of an embedded
    master (:func:`hwregress.spark.master.local_slots`: ``local[4]`` 4, ``local[*]`` the cores) runs its own worker,
    model and CUDA context on the device under test. That is a measurement of GPU sharing, not of one worker per GPU,
    which the default ``local[1]`` gives; a cluster master (``spark://``, ``yarn``, ``k8s://``) is left to Spark's
    resource scheduling. ``devices``: the selected devices (``cuda:0``, ``mps``, ``cpu``); ``source``: the flag or
    ini key the master came from, named in the sentence."""
    gpus = [device for device in devices if device_kind(device) != "cpu"]
    slots = local_slots(master, engine.host_cores())
    if not gpus or slots is None or slots <= GPU_TASK_SLOTS:
        return None
    return (f"{source}={master} on a GPU ({', '.join(gpus)}): {slots} task slots, and Spark's local mode gives a task "
            f"no GPU, so {slots} Python workers, each with its own model and CUDA context, share the one GPU a test "
            f"runs on; leave {source} out for local[{GPU_TASK_SLOTS}] on GPU tests (the CPU keeps local[cores]), or "
            "keep it to measure workers sharing a GPU")


@dataclass(frozen=True)
class SparkSettings:
    """The ``--spark-*`` options.

    Attributes:
        master: master URL (``--spark-master``); None: :func:`default_master` of the device under test
            (``local[cores]`` on the CPU, ``local[1]`` on a GPU).
        conf: ``--spark-conf key=value`` pairs, in order.
        rows: rows of the batch data set (``--spark-rows``); None: :data:`DEFAULT_ROWS` of the device kind.
        stream_rate: images written per second (``--spark-stream-rate``); None: :data:`DEFAULT_RATE`.
        stream_images: images measured in the stream (``--spark-stream-images``); None: rate x
            :data:`DEFAULT_STREAM_SECONDS`.
    """

    master: str | None = None
    conf: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    rows: int | None = None
    stream_rate: float | None = None
    stream_images: int | None = None

    def engine(self, device: str = "cpu") -> EngineConfig:
        """The session a test on ``device`` runs in: the given master, else :func:`default_master` of ``device``."""
        return EngineConfig(self.master or default_master(device), self.conf)

    def rows_for(self, device: str) -> int:
        return self.rows or DEFAULT_ROWS.get(device_kind(device), DEFAULT_ROWS["cpu"])

    def rate_for(self, device: str) -> float:
        return self.stream_rate or DEFAULT_RATE.get(device_kind(device), DEFAULT_RATE["cpu"])

    def images_for(self, device: str) -> int:
        return self.stream_images or int(self.rate_for(device) * DEFAULT_STREAM_SECONDS)
