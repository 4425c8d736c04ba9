#!/usr/bin/env bash
# The real-system figures of the README's "Verdicts on this machine": record the CPU tier (three sessions) into a scratch
# baseline folder, then three unchanged sessions (A/A), one with two busy loops stealing the cores
# (contention), and the level shift (re-record under contention with =force, judge under contention again).
# Usage: scripts/verdict_runs.sh [OUT_DIR]   (about 15 minutes on a 2-core VM; run it on a quiet machine)
#        MARK="cpu and (scaling or colocated)" LEVEL_SHIFT=0 scripts/verdict_runs.sh OUT_DIR   (the scale-out families:
#        record x3, A/A x3, contention; about 12 minutes)
#        MARK=spark EXTRA="--devices cpu --spark-rows 1024" LEVEL_SHIFT=0 scripts/verdict_runs.sh OUT_DIR   (the spark
#        family's batch and stream, about 12 minutes)
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-$(mktemp -d)}"
mkdir -p "$out"
base="$out/baselines"
run() {  # run NAME [pytest args...]: one CPU-tier session, its verdict counts on one line
    local name="$1"; shift
    # shellcheck disable=SC2086
    python -m pytest -m "${MARK:-cpu}" -p no:cacheprovider -q --baseline-dir="$base" --report-dir="$out/$name" ${EXTRA:-} "$@" \
        >"$out/$name.log" 2>&1
    python - "$out/$name/results.json" "$name" <<'PY'
import collections, json, sys
records = json.load(open(sys.argv[1]))["records"]
timed = [r for r in records if r["samples"]]
counts = collections.Counter(r["verdict"] for r in timed)
ratios = sorted(round(r["ratio"], 3) for r in timed if r.get("ratio"))
diagnosed = sum(1 for r in timed if r["verdict"] == "regression" and any("contention" in d or "other processes" in d for d in r.get("diagnosis", [])))
thresholds = [r["threshold"] for r in timed if r.get("threshold") is not None]
efficiency = [f"{r['efficiency']:.3f}/{r['baseline_efficiency']:.3f}" for r in timed
              if r.get("efficiency") is not None and r.get("baseline_efficiency") is not None]
latency = [f"{r['latency_ms']:.0f}/{r['baseline_latency_ms']:.0f} ms" for r in timed
           if r.get("baseline_latency_ms") is not None and r.get("latency_ms") is not None]
print(f"{sys.argv[2]}: {len(timed)} timed tests: {dict(counts)}; ratios {ratios[:3]}..{ratios[-3:]}; "
      f"max threshold {max(thresholds, default=0):.3f}; regressions diagnosed as contention: {diagnosed}"
      + (f"; efficiency now/baseline {efficiency}" if efficiency else "")
      + (f"; judged latency now/baseline {latency}" if latency else ""))
PY
}
busy() { for _ in 1 2; do python -c "while True: pass" & done; }
stop_busy() { kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; }

for i in 1 2 3; do run "record$i" --update-baselines; done  # three sessions: the drift between them is learnt
for i in 1 2 3; do run "aa$i"; done
busy; run contention; stop_busy
if [ "${LEVEL_SHIFT:-1}" = 1 ]; then
    busy; run record-under-contention --update-baselines=force; stop_busy
    busy; run level-shift; stop_busy
fi
echo "logs and results under $out"
