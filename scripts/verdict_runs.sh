#!/usr/bin/env bash
# The real-system figures of the README's "Verdicts on this machine": record the CPU tier (three sessions) into a scratch
# baseline folder, then five unchanged sessions (A/A), one with two busy loops stealing the cores (contention), then a
# second scratch folder whose history holds one odd session (the first recording under two busy loops, then two quiet
# ones) judged under contention ("odd-history"), and optionally the level shift (re-record under contention with =force,
# judge under contention again: LEVEL_SHIFT=1).
# Usage: scripts/verdict_runs.sh [OUT_DIR]   (about 30 minutes on a 2-core VM; run it on a quiet machine)
#        AA=3 ODD=0 scripts/verdict_runs.sh OUT_DIR   (fewer unchanged sessions, no odd history)
#        MARK="cpu and (scaling or colocated)" ODD=0 scripts/verdict_runs.sh OUT_DIR   (the scale-out families)
#        MARK=spark EXTRA="--devices cpu --spark-rows 1024" ODD=0 scripts/verdict_runs.sh OUT_DIR   (the spark family)
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-$(mktemp -d)}"
mkdir -p "$out"
base="$out/baselines"
run() {  # run NAME [pytest args...]: one CPU-tier session, its verdict counts on one line
    local name="$1"; shift
    local started=$SECONDS
    # shellcheck disable=SC2086
    python -m pytest -m "${MARK:-cpu}" -p no:cacheprovider -q --baseline-dir="$base" --report-dir="$out/$name" ${EXTRA:-} "$@" \
        >"$out/$name.log" 2>&1
    echo "$name: $((SECONDS - started)) s"
    python - "$out/$name/results.json" "$name" <<'PY'
import collections, json, sys
records = json.load(open(sys.argv[1]))["records"]
timed = [r for r in records if r["samples"]]
counts = collections.Counter(r["verdict"] for r in timed)
ratios = sorted(round(r["ratio"], 3) for r in timed if r.get("ratio"))
extended = sum(1 for r in timed if (r.get("details") or {}).get("verdict_rounds"))
diagnosed = sum(1 for r in timed if r["verdict"] == "regression" and any("contention" in d or "other processes" in d for d in r.get("diagnosis", [])))
thresholds = [r["threshold"] for r in timed if r.get("threshold") is not None]
efficiency = [f"{r['efficiency']:.3f}/{r['baseline_efficiency']:.3f}" for r in timed
              if r.get("efficiency") is not None and r.get("baseline_efficiency") is not None]
latency = [f"{r['latency_ms']:.0f}/{r['baseline_latency_ms']:.0f} ms" for r in timed
           if r.get("baseline_latency_ms") is not None and r.get("latency_ms") is not None]
print(f"{sys.argv[2]}: {len(timed)} timed tests: {dict(counts)}; ratios {ratios[:3]}..{ratios[-3:]}; "
      f"max threshold {max(thresholds, default=0):.3f}; regressions diagnosed as contention: {diagnosed}; "
      f"windows extended for an open verdict: {extended}"
      + (f"; efficiency now/baseline {efficiency}" if efficiency else "")
      + (f"; judged latency now/baseline {latency}" if latency else "")
      + "".join(f"\n  {r['verdict']}: {r['test_id']} ratio {r['ratio']:.3f} threshold {r['threshold']:.3f} "
                f"rounds {r.get('rounds')} diagnosis {(r.get('diagnosis') or ['-'])[0][:90]}"
                for r in timed if r["verdict"] in ("regression", "unstable") and r.get("ratio") is not None))
PY
}
busy() { for _ in 1 2; do python -c "while True: pass" & done; }
stop_busy() { kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; }

for i in 1 2 3; do run "record$i" --update-baselines; done  # three sessions: the drift between them is learnt
for i in $(seq 1 "${AA:-5}"); do run "aa$i"; done
busy; run contention; stop_busy
if [ "${ODD:-1}" = 1 ]; then  # a history with one odd session: recorded under contention, then two quiet ones
    base="$out/baselines-odd"
    busy; run odd-record1 --update-baselines; stop_busy
    run odd-record2 --update-baselines
    run odd-record3 --update-baselines
    busy; run odd-history; stop_busy
    base="$out/baselines"
fi
if [ "${LEVEL_SHIFT:-0}" = 1 ]; then
    busy; run record-under-contention --update-baselines=force; stop_busy
    busy; run level-shift; stop_busy
fi
echo "logs and results under $out"
