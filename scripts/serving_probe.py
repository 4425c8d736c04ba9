"""What a served model does under load on this machine: a real server (``transformers serve``, or ``vllm serve``)
replaying seeded open-loop traces at a sweep of request rates, each after an untimed warm-up replay, several windows
per rate, with every window's figures (hwregress.serving.figures) and the sweep's capacity. It is the measurement
behind the serving tier's defaults: which rates a CPU or a GPU sustains, how a window's p99 TTFT and TPOT spread from
one replay to the next, and how long a window takes.

Usage: ``PYTHONPATH=src python scripts/serving_probe.py --device cpu --model llama_small --rates 1 2 4
--requests 24 --prompt 64 --output 32 --windows 3 --out probe.json`` (on 2 CPU cores about rates x (windows + 1) x
requests / rate seconds, and the server's start).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from hwregress.serving import server as serving
from hwregress.serving.client import replay
from hwregress.serving.figures import Slo, capacity, window_figures
from hwregress.serving.settings import kv_cache_blocks
from hwregress.serving.trace import Arrivals, fixed_lengths, long_tail_lengths, make_trace
from hwregress.workloads.served import FIRST_WORD_ID, write_served_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", default="transformers", choices=serving.ENGINES)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--model", default="llama_small")
    parser.add_argument("--rates", type=float, nargs="+", default=[1.0, 2.0, 4.0])
    parser.add_argument("--burstiness", type=float, default=1.0)
    parser.add_argument("--requests", type=int, default=24)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--output", type=int, default=32)
    parser.add_argument("--long-tail", action="store_true")
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--ttft-ms", type=float, default=2000.0)
    parser.add_argument("--tpot-ms", type=float, default=100.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="hwregress-serving-probe-"))
    written = time.perf_counter()
    model = write_served_model(args.model, folder / "model", seed=args.seed)
    record: dict[str, Any] = {"args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                              "write_s": time.perf_counter() - written, "rates": []}
    lengths = (long_tail_lengths if args.long_tail else fixed_lengths)(args.prompt, args.output)
    blocks = kv_cache_blocks(args.requests, [lengths])
    server = serving.start_server(lambda port: serving.server_command(args.engine, model.folder, args.device, port,
                                                                      kv_cache_blocks=blocks),
                                  folder / "server.log", engine=args.engine)
    record["start_s"] = server.started_s
    slo = Slo(ttft_ms=args.ttft_ms, tpot_ms=args.tpot_ms)
    try:
        for rate in args.rates:
            trace = make_trace(args.seed, args.requests, Arrivals(rate=rate, burstiness=args.burstiness), lengths)
            prompt = lambda r: model.prompt_text(r.prompt_token_ids(model.vocab_size, FIRST_WORD_ID))  # noqa: E731
            warm = replay(server.url, str(model.folder), trace, prompt)
            windows = []
            for _ in range(args.windows):
                done = replay(server.url, str(model.folder), trace, prompt)
                windows.append(window_figures(done.timings, done.duration_s, slo).to_json())
            record["rates"].append({"rate": rate, "trace_digest": trace.digest, "warmup_s": warm.duration_s,
                                    "windows": windows})
            shown = "  ".join(f"ttft p50 {w['ttft']['p50']:.0f} p99 {w['ttft']['p99']:.0f} tpot p50 "
                              f"{w['tpot']['p50']:.0f} good {w['goodput']:.2f}/s {w['duration_s']:.1f}s"
                              for w in windows)
            print(f"rate {rate:g}/s warm-up {warm.duration_s:.1f}s | {shown}", flush=True)
    finally:
        server.stop()
    goodputs = [min(w["goodput"] for w in r["windows"]) for r in record["rates"]]
    record["capacity"] = capacity(args.rates, goodputs)
    record["slo"] = asdict(slo)
    args.out.write_text(json.dumps(record, indent=1))
    print(f"capacity (goodput within 5% of the sweep's best): {record['capacity']:g} requests/s")


if __name__ == "__main__":
    main()
