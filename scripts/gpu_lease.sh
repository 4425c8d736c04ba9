#!/usr/bin/env bash
# The first act of a session lent a GPU (issue 39 part 3), as one prepared command within the lease's 540-s call:
#
#   1. python -m hwregress check (the isolation check has never finished on a GPU), its JSON rewritten after each check;
#   2. the default GPU tier, recording (--update-baselines), per-test duration_s in results.json, for what time is left;
#   3. everything under $OUT tarred into one file (a lease once lost its results.json files to too many files).
#
# Usage (on the device machine, from the repository root): OUT=/path bash scripts/gpu_lease.sh [SECONDS]
# SECONDS is the whole script's budget (default 520): the check gets at most 150 s, the tier what is left less 20 s for
# the tar. Afterwards, here: scripts/tier_durations.py on the tier's results.json, the baselines file it wrote
# (baselines-recorded/), and the check's JSON go into tests/data/tier_durations/, baselines/ and docs/measured.md.
set -uo pipefail
budget="${1:-520}"
out="${OUT:?set OUT to the folder whose files come back}"
started=$(date +%s)
export PYTHONPATH="$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$out/lease"
log() { echo "[$(( $(date +%s) - started )) s] $*" | tee -a "$out/lease/steps.log"; }

log "python $(python -c 'import sys; print(sys.version.split()[0])'), $(python -c 'import torch; print(torch.__version__, torch.version.cuda)' 2>&1)"
nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm --format=csv > "$out/lease/nvidia-smi.csv" 2>&1
python -c "import hwregress" || { log "hwregress does not import: PYTHONPATH=$PYTHONPATH"; }

log "check: start"
timeout 150 python -m hwregress check --json "$out/lease/check.json" > "$out/lease/check.txt" 2>&1
log "check: exit $?"

left=$(( budget - ($(date +%s) - started) - 20 ))
log "default tier, recording: start, ${left} s left"
mkdir -p "$out/lease/baselines-recorded"
cp baselines/*.json "$out/lease/baselines-recorded/" 2>/dev/null
timeout "$left" python -m pytest -m gpu --tier default --update-baselines -p no:cacheprovider -q -rA \
    --baseline-dir="$out/lease/baselines-recorded" --report-dir="$out/lease/default-1" \
    > "$out/lease/default-1.txt" 2>&1
log "default tier: exit $?"

tar -czf "$out/lease.tar.gz" -C "$out" lease && rm -rf "$out/lease"
echo "[$(( $(date +%s) - started )) s] tarred $out/lease.tar.gz"
