#!/usr/bin/env bash
# README command 2: install, build and run every test, on both supported
# torches; pytest's summary line of the torch 2.x suite ends the output.
#   1. the project venv with PyPI's torch 2.x and metafuse built into it by
#      the pip route (tools/setup_venv.sh: LLVM on, CUDA compiled in);
#   2. the Bazel route against Debian's LibTorch 1.13.1: every C++ test, and
#      the compiler, optimizer and TorchOpt-compatibility Python tests with
#      /usr/bin/python3 (Debian's torch) on the Bazel-built extension;
#   3. the whole Python suite against the venv's installed metafuse (torch 2.x),
#      the documentation site included: tests/python/docs builds it with Sphinx
#      (warnings as errors), opens it in headless Chromium and runs the code of
#      every tutorial.
# The Bazel route against torch 2.x (`bazel test --config=torch2 //...`) is
# not run here: switching Bazel's LibTorch rebuilds every target, and a third
# full C++ build does not fit CI's time on 2 cores (docs/building.md).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONDONTWRITEBYTECODE=1
step() { echo; echo "test_all: ==== $* ($(date +%H:%M:%S))"; }

step "1/3 the project venv (torch 2.x, pip route)"
bash tools/setup_venv.sh

step "2/3 Bazel against Debian's LibTorch 1.13.1: C++ tests, then Python tests on torch 1.13.1"
bash tools/build.sh
bazel test //...
bash tools/asan_tests.sh  # C++ tests under ASan + UBSan; fuzzing: tools/fuzz.sh (docs/fuzzing.md)
PYTHONPATH="$PWD/frontend/python" /usr/bin/python3 -m pytest -q -p no:cacheprovider \
  tests/python/compiler tests/python/optim tests/python/torchopt_compat

step "3/3 the whole Python suite on torch 2.x (the venv's installed metafuse)"
METAFUSE_TEST_INSTALLED=1 .venv/bin/python -m pytest tests/python -q -p no:cacheprovider
