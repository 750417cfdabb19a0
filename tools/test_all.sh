#!/usr/bin/env bash
# README command 2: install, build, run every test. C++ (GoogleTest through
# `bazel test`) first, then Python (pytest), then the pip route: the package
# built by pip into a venv without LLVM, and Python tests against it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh
bazel test //...
PYTHONPATH="$PWD/frontend/python" /usr/bin/python3 -m pytest tests/python -q -p no:cacheprovider
bash tools/test_pip.sh
