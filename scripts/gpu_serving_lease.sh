#!/usr/bin/env bash
# A later lease's serving act (issue 41: the small Llama-class model via transformers serve on a GPU, p99 stated on
# >= 459 requests), as one prepared command within a lease's 540-s call:
#
#   1. the serving extra installed from the carried wheels (scripts/serving_wheels.sh) into a folder of its own,
#      first on PYTHONPATH (the GPU machine has no FastAPI, uvicorn or httpx, and an older transformers);
#   2. the GPU defaults recorded (--update-baselines): an open loop at 8 requests/s and a closed loop of 32 clients,
#      200 requests a window, 5 windows: 1,000 requests state a p99;
#   3. the same judged against that recording (an A/A at the planned looks), for what time is left;
#   4. everything under $OUT tarred into one file.
#
# Usage (on the device machine, from the repository root, wheels/serving carried):
#   OUT=/path bash scripts/gpu_serving_lease.sh [SECONDS]
# SECONDS is the whole script's budget (default 520). DEVICE (default cuda:0) and SERVING_ARGS (extra pytest options,
# e.g. "--serving-sweep 8,16,32,64,128") change what runs; DEVICE=cpu rehearses it on a CPU.
set -uo pipefail
budget="${1:-520}"
out="${OUT:?set OUT to the folder whose files come back}"
device="${DEVICE:-cuda:0}"
started=$(date +%s)
mkdir -p "$out/lease"
log() { echo "[$(( $(date +%s) - started )) s] $*" | tee -a "$out/lease/steps.log"; }
left() { echo $(( budget - ($(date +%s) - started) - 20 )); }

site=$(mktemp -d)/site
if compgen -G "wheels/serving/*.whl" > /dev/null; then
    pip install --quiet --no-index --no-deps --target "$site" wheels/serving/*.whl > "$out/lease/install.txt" 2>&1
    log "serving wheels installed into $site: exit $?"
else
    log "no wheels/serving/ carried: using what this machine has"
fi
export PYTHONPATH="$site:$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}"
python -c "import fastapi, uvicorn, httpx, transformers, torch; print('transformers', transformers.__version__, \
'torch', torch.__version__)" 2>&1 | tee -a "$out/lease/steps.log"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$out/lease/nvidia-smi.csv" 2>&1

run() {  # $1: the session's name; the rest: pytest options
    local name=$1; shift
    timeout "$(left)" python -m pytest bench_tests/test_serving.py -m serving --devices "$device" -p no:cacheprovider \
        -q -rA --baseline-dir="$out/lease/baselines" --report-dir="$out/lease/$name" ${SERVING_ARGS:-} "$@" \
        > "$out/lease/$name.txt" 2>&1
    log "$name: exit $?"
}
log "recording: start, $(left) s left"
run serving-recorded --update-baselines
if [ "$(left)" -gt 120 ]; then
    log "judged: start, $(left) s left"
    run serving-judged
fi
tar -czf "$out/lease.tar.gz" -C "$out" lease && rm -rf "$out/lease"
echo "[$(( $(date +%s) - started )) s] tarred $out/lease.tar.gz"
