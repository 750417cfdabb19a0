#!/usr/bin/env bash
# README command 2: install, build, run every test. C++ (GoogleTest through
# `bazel test`) first, then Python (pytest), whose summary line ends the run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh
bazel test //...
PYTHONPATH="$PWD/frontend/python" /usr/bin/python3 -m pytest tests/python -q -p no:cacheprovider
