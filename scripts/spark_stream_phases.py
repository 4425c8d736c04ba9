"""A Spark stream timed phase by phase: the session's start, then each change in the images produced and predicted,
printed with the seconds since the start (docs/data/selftest_time_2026-11-29c.md).

The stream is the one of tests/spark/test_spark_e2e.py's restart test: 8 warm-up and 80 measured images of
mobilenet_v3_small at 40 images/s on ``local[2]``, stopped after 30 and restarted. ``--conf KEY=VALUE`` (repeatable)
adds Spark settings, e.g. ``--conf "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"``.

Run: ``python scripts/spark_stream_phases.py [--conf KEY=VALUE]...`` (needs the spark extra and Java 17+).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from hwregress.spark import engine, stream
from hwregress.spark.predictor import PredictSpec, pixel_statistics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting")
    args = parser.parse_args()
    started = time.perf_counter()

    def say(what: str) -> None:
        print(f"{time.perf_counter() - started:7.2f} s  {what}", flush=True)

    session = engine.start_session(engine.EngineConfig("local[2]", engine.parse_conf(args.conf, "--conf")))
    say("session started")
    last: list[tuple[int, int]] = []

    def watch(produced: int, predicted: int, total: int) -> None:
        if not last or last[-1] != (produced, predicted):
            last.append((produced, predicted))
            say(f"produced {produced}, predicted {predicted} of {total}")

    try:
        mean, std = pixel_statistics()
        spec = stream.StreamSpec(PredictSpec("mobilenet_v3_small", "cpu", "fp32", (), mean, std), batch_size=8,
                                 images=80, rate=40.0, folder=Path(tempfile.mkdtemp()) / "stream", warmup_images=8,
                                 restart_after=30, watch=watch)
        result = stream.run_stream(session, spec)
        say(f"stream done: {result.produced} produced, {result.predicted} predicted, {result.restarts} restart")
    finally:
        session.stop()
    say("session stopped")


if __name__ == "__main__":
    main()
