#!/usr/bin/env bash
# README command 1: install, build, run the main job: MAML on sinusoid
# regression in the eager path, fused versus unfused optimizer operators
# (bench/maml_sinusoid.py; prints the per-meta-step ratio and the meta-training
# curve, writes maml_sinusoid_curve.png).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh
PYTHONPATH="$PWD/frontend/python" /usr/bin/python3 bench/maml_sinusoid.py "$@"
