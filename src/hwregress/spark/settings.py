"""What the ``spark`` family's options decided, and its defaults per device kind."""

from __future__ import annotations

from dataclasses import dataclass, field

from hwregress.hardware.facts import device_kind
from hwregress.spark.engine import EngineConfig, default_master

# rows of the batch data set: the 1,797 digits repeated to a few thousand, more where a pass is fast
DEFAULT_ROWS = {"cpu": 2048, "cuda": 16384, "mps": 4096}
# streamed images per second: well under what the engine sustains on that device kind (CPU: ~250 images/s of
# mobilenet_v3_small on 2 cores), so a healthy stream keeps up and its latency is the engine's, not a queue's
DEFAULT_RATE = {"cpu": 20.0, "cuda": 200.0, "mps": 100.0}
DEFAULT_STREAM_SECONDS = 15.0  # measured images = rate x this


@dataclass(frozen=True)
class SparkSettings:
    """The ``--spark-*`` options.

    Attributes:
        master: master URL (``--spark-master``); None: ``local[N]``, N = this host's cores.
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

    def engine(self) -> EngineConfig:
        return EngineConfig(self.master or default_master(), self.conf)

    def rows_for(self, device: str) -> int:
        return self.rows or DEFAULT_ROWS.get(device_kind(device), DEFAULT_ROWS["cpu"])

    def rate_for(self, device: str) -> float:
        return self.stream_rate or DEFAULT_RATE.get(device_kind(device), DEFAULT_RATE["cpu"])

    def images_for(self, device: str) -> int:
        return self.stream_images or int(self.rate_for(device) * DEFAULT_STREAM_SECONDS)
