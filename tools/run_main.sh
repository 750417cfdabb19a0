#!/usr/bin/env bash
# README command 1: install, build, run the main job: MAML on sinusoid
# regression, (1) in the eager path, fused versus unfused optimizer operators
# (bench/maml_sinusoid.py: per-meta-step ratio, the meta-training curve,
# maml_sinusoid_curve.png), then (2) compiled versus eager
# (bench/maml_compiled.py: ratio and compile latency).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh
export PYTHONPATH="$PWD/frontend/python"
/usr/bin/python3 bench/maml_sinusoid.py "$@"
echo
/usr/bin/python3 bench/maml_compiled.py
