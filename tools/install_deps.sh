#!/usr/bin/env bash
# Installs every Debian package metafuse needs. Idempotent: when everything is
# already present it changes nothing and does not touch the network.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap            # Bazel 4.2.3, the build
  g++ libomp-14-dev          # C++17 compiler; OpenMP comes with g++ (libgomp)
  libtorch-dev python3-torch # LibTorch 1.13.1 + its Python front for /usr/bin/python3
  libopenblas0-openmp        # an optimized BLAS behind libblas.so.3 (Debian's default is
                             # the reference BLAS), on torch's OpenMP threads. Not the
                             # serial build: ATen calls the BLAS from two threads at
                             # once (float64 convolutions), which corrupts the serial
                             # build's shared buffers (tests/python/test_blas_threads.py)
  libabsl-dev libgtest-dev libgmock-dev libbenchmark-dev
  llvm-14-dev                # ORC LLJIT for CPU code generation
  clang libclang-rt-14-dev   # libFuzzer and clang's sanitizer runtimes (tools/fuzz.sh)
  pybind11-dev python3-pybind11 python3-dev
  python3-pytest python3-numpy python3-matplotlib
  graphviz python3-graphviz   # dot; metafuse.visual renders through the graphviz package
  libgloo-dev libtensorpipe-dev  # torch.distributed backends
  nlohmann-json3-dev libssl-dev  # the C++ AOT runner: manifest.json, SHA-256 (libcrypto)
  python3-setuptools python3-wheel python3-pip python3-venv ninja-build  # the pip route (setup.py)
  chromium                   # headless, for the docs site's browser test (tests/python/docs)
  zlib1g-dev libzstd-dev libtinfo-dev libxml2-dev libffi-dev libedit-dev  # what llvm-config --system-libs names
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all ${#PACKAGES[@]} packages already installed"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install_deps: installing ${missing[*]}"
$SUDO apt-get update
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
