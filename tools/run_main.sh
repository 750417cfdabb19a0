#!/usr/bin/env bash
# README command 1: install, build, run the main job: MAML on sinusoid
# regression trained side by side by the eager path (MetaSGD, unfused and
# fused optimizer operators) and the compiled path (fusion off and on):
# curves, time per meta-step and ratios, compile latency, tensor memory
# (bench/maml_compiled.py). Extra arguments go to it (e.g. --iterations 30).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh
export PYTHONPATH="$PWD/frontend/python"
/usr/bin/python3 bench/maml_compiled.py --iterations 100 "$@"
