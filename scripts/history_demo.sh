#!/usr/bin/env bash
# The session history on real runs of this machine: record a baseline, four unchanged sessions, then four sessions
# with one busy loop stealing a core (a real step), into scratch folders. Prints the history command's table and
# exit code and writes the trend chart of the first test, with the report's chart CSS inlined, to docs/trend-chart.svg.
# Usage: scripts/history_demo.sh [OUT_DIR]   (about 3 minutes on a 2-core VM; run it on a quiet machine)
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-$(mktemp -d)}"
mkdir -p "$out"
session() {
    python -m pytest -m cpu -k test_throughput -p no:cacheprovider -q --models resnet18 --modes infer,train \
        --batch-sizes 8 --baseline-dir="$out/baselines" --report-dir="$out/reports" "$@" >>"$out/sessions.log" 2>&1
    tail -1 "$out/sessions.log"
}
session --update-baselines
for _ in 1 2 3 4; do session; done
python -c "while True: pass" & busy=$!
for _ in 1 2 3 4; do session; done
kill "$busy"; wait "$busy" 2>/dev/null
python -m hwregress history --dir "$out/reports/history" --fail-on regression
echo "history --fail-on regression exit code: $?"
python - "$out/reports/report.html" docs/trend-chart.svg <<'PY'
import re, sys
from pathlib import Path
html = Path(sys.argv[1]).read_text()
css = "\n".join(line for line in re.search(r"<style>(.*?)</style>", html, re.S).group(1).splitlines()
                if line.startswith("svg"))
svg = re.search(r'<svg class="chart trend".*?</svg>', html, re.S).group(0)
svg = svg.replace(">", f"><style>text {{ font-family: sans-serif; }} {css}</style>", 1)
Path(sys.argv[2]).parent.mkdir(exist_ok=True)
Path(sys.argv[2]).write_text(svg + "\n")
print(f"wrote {sys.argv[2]}")
PY
echo "sessions, reports and history under $out"
