#!/usr/bin/env bash
# README command 1: install, build, run the main job (examples/demo.py).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh
PYTHONPATH="$PWD/frontend/python" /usr/bin/python3 examples/demo.py "$@"
