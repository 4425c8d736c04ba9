#!/usr/bin/env bash
# The serving extra's wheels for the lent GPU machine (Python 3.12, x86-64, no network; it has torch and an older
# transformers), downloaded here into wheels/serving/ (ignored by git), which scripts/gpu_serving_lease.sh installs
# there: transformers 5.24 with its serving extra (FastAPI, uvicorn, openai, pydantic) and httpx, without torch, CUDA
# or what the GPU machine already has (numpy, jinja2, psutil, pyyaml, regex, filelock, fsspec, packaging). About 31 MB:
# carry it with the run (`carry: ["wheels/serving"]`, 64 MiB in all).
set -euo pipefail
cd "$(dirname "$0")/.."
dest=wheels/serving
all=$(mktemp -d)
pip download --quiet --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 --platform any -d "$all" \
    "transformers[serving]==5.24.0" "httpx>=0.27"
mkdir -p "$dest"
skip='^(torch|triton|nvidia_[a-z0-9_]+|numpy|sympy|mpmath|networkx|setuptools|jinja2|markupsafe|psutil|pyyaml|filelock|fsspec|packaging|regex)-'
for wheel in "$all"/*.whl; do
    name=$(basename "$wheel")
    if [[ ! $name =~ $skip ]]; then cp "$wheel" "$dest/"; fi
done
rm -rf "$all"
echo "$(ls "$dest" | wc -l) wheels, $(du -sh "$dest" | cut -f1) in $dest"
