#!/usr/bin/env bash
# The GPU checks of issue 18 (item 7), as one script for a lent GPU machine
# whose device time is short (PyTorch 2.x with CUDA, nvcc, no Bazel):
#
#   1. the pip route against the installed torch, with CUDA, LLVM off;
#      if it fails, ninja rebuilds with -k 0 so that every failing source is
#      reported in one run, and the script stops;
#   2. what the build has (build_info, cuda_status);
#   3. the CUDA tests (compiled programs on CUDA, the fused optimizer
#      operators' CUDA form), against the installed package;
#   4. bench/cuda_bench.py (fused Adam vs copy bandwidth, MAML on the GPU,
#      NVRTC latency);
#   5. the whole Python suite against that build, a pytest per test folder
#      (pytest-xdist inside each if present),
#      in the time that is left.
#
# Usage: bash tools/gpu_check.sh [OUTDIR]   (default $OUT, else /tmp/metafuse_gpu)
# Environment:
#   METAFUSE_GPU_DEBS    a folder of Debian .deb files (libabsl-dev,
#                        libabsl20220623, libssl-dev, libssl3) unpacked with
#                        dpkg -x where the machine lacks Abseil or OpenSSL's
#                        headers; never installed into /
#   METAFUSE_GPU_BUDGET  seconds for the whole script (default 540); each step
#                        gets its own cap or what is left, whichever is less
#   PYTHON               the interpreter that holds torch (default python3)
#   METAFUSE_GPU_EXTRA   a command run right after the build (a diagnostic of
#                        the moment), 60 s at most, output in extra.log
# Every step's output goes to OUTDIR (env.txt, build.log, gpu_tests.log,
# cuda_bench.log, suite.log); summary.txt says what each step did.
set -uo pipefail
cd "$(dirname "$0")/.."
out="$(realpath -m "${1:-${OUT:-/tmp/metafuse_gpu}}")"
mkdir -p "$out"
py="${PYTHON:-python3}"
start=$SECONDS
budget="${METAFUSE_GPU_BUDGET:-540}"

say() { echo "gpu_check: $*" | tee -a "$out/summary.txt"; }
# seconds for the next step: its cap, or what is left of the budget
allow() {
  local left=$((budget - (SECONDS - start) - 10))
  (( left < $1 )) && echo $((left > 5 ? left : 5)) || echo "$1"
}
step() {  # step NAME CAP LOG COMMAND...; the status goes to the summary
  local name=$1 cap; cap=$(allow "$2"); local log=$3; shift 3
  local t0=$SECONDS
  timeout --kill-after=10 "$cap" "$@" > "$log" 2>&1
  local rc=$?
  say "$name: exit $rc in $((SECONDS - t0)) s (cap $cap s)$( ((rc == 124)) && echo ', TIMED OUT')"
  return $rc
}

{
  nvidia-smi || true
  "$py" -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__,
    "cuda", torch.version.cuda, "gpu", torch.cuda.is_available() and torch.cuda.get_device_name())'
  nvcc --version | tail -2 || true
  "${CXX:-c++}" --version | head -1
  grep PRETTY_NAME /etc/os-release || true
  nproc
} > "$out/env.txt" 2>&1
say "start: $(grep -m1 ^python "$out/env.txt")"

# Abseil and OpenSSL's headers, from .deb files when the machine has none.
deps=/tmp/metafuse_deps
unpack() {  # unpack DIR PATTERN...
  local dir=$1; shift
  mkdir -p "$deps/$dir"
  for pattern in "$@"; do
    for deb in "$METAFUSE_GPU_DEBS"/$pattern; do dpkg -x "$deb" "$deps/$dir"; done
  done
}
if [[ -n "${METAFUSE_GPU_DEBS:-}" ]]; then
  lib=lib/x86_64-linux-gnu
  if [[ ! -e /usr/include/absl/base/config.h ]]; then
    unpack absl 'libabsl*.deb'
    export CPATH="$deps/absl/usr/include${CPATH:+:$CPATH}"
    export LIBRARY_PATH="$deps/absl/usr/$lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
    export LD_LIBRARY_PATH="$deps/absl/usr/$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    say "Abseil from $METAFUSE_GPU_DEBS"
  fi
  if [[ ! -e /usr/include/openssl/evp.h ]]; then
    unpack ssl 'libssl-dev*.deb' 'libssl3*.deb'
    # headers and the link-time libcrypto.so; at run time the machine's own
    # libcrypto.so.3 when it has one
    export CPATH="$deps/ssl/usr/include:$deps/ssl/usr/include/x86_64-linux-gnu${CPATH:+:$CPATH}"
    export LIBRARY_PATH="$deps/ssl/usr/$lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
    if ! ldconfig -p | grep -q 'libcrypto.so.3 '; then
      export LD_LIBRARY_PATH="$deps/ssl/usr/$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
    say "OpenSSL headers from $METAFUSE_GPU_DEBS"
  fi
fi

# 1. The pip route.
jobs=$(nproc)
if ! step "pip install (MAX_JOBS=$jobs)" 330 "$out/build.log" \
    env METAFUSE_WITH_LLVM=0 MAX_JOBS="$jobs" \
    "$py" -m pip install --no-build-isolation --no-index --no-deps -v .; then
  ninja_dir=$(dirname "$(ls build/temp.*/build.ninja 2>/dev/null | head -1)")
  if [[ -f "$ninja_dir/build.ninja" ]]; then
    step "ninja -k 0 (every failing source)" 200 "$out/build_all_errors.log" \
      ninja -k 0 -j "$jobs" -C "$ninja_dir"
    say "failing sources: $(grep -c '^FAILED' "$out/build_all_errors.log")"
  fi
  exit 1
fi

# 2. What the build has. Run outside the repository so that the installed
# package, not frontend/python, is imported.
(cd /tmp && step "import" 60 "$out/build_info.txt" "$py" -c '
import metafuse, torch
print(metafuse.__file__)
print(metafuse._C.build_info())
print("cuda_status", metafuse.cuda_status())
print("CUDA kernel for adam_multi_:",
      torch._C._dispatch_has_kernel_for_dispatch_key("metafuse::adam_multi_", "CUDA"))')
cat "$out/build_info.txt" >> "$out/summary.txt"
# One libstdc++ in the process: torch's, shared. A static copy inside the
# extension crashed on torch 2.11 (setup.py links -lstdc++ for that).
so=$(cd /tmp && "$py" -c 'import metafuse._C as c; print(c.__file__)' 2>/dev/null)
if [[ -n "$so" ]]; then
  say "libstdc++ of _C: $(ldd "$so" | grep -o 'libstdc++[^ ]* => [^ ]*' || echo 'none shared');"\
      "static libstdc++ code inside: $(nm "$so" 2>/dev/null | grep -c -E 'read_utf8_code_point|_ZNSt6locale5_ImplC')"
fi

if [[ -n "${METAFUSE_GPU_EXTRA:-}" ]]; then
  (cd /tmp && step "extra: $METAFUSE_GPU_EXTRA" 60 "$out/extra.log" bash -c "$METAFUSE_GPU_EXTRA")
fi

# 3. The CUDA tests.
export METAFUSE_TEST_INSTALLED=1
step "CUDA tests" 150 "$out/gpu_tests.log" "$py" -m pytest -v -rs -p no:cacheprovider \
  tests/python/compiler/test_cuda.py tests/python/test_cuda_status.py
tail -3 "$out/gpu_tests.log" >> "$out/summary.txt"

# 4. The GPU benchmark.
step "cuda_bench" 150 "$out/cuda_bench.log" "$py" bench/cuda_bench.py
tail -25 "$out/cuda_bench.log" >> "$out/summary.txt"

# 5. The whole suite, in what is left: one pytest per folder of
# tests/python (and one for its top-level files), so that a crash (a
# segmentation fault kills pytest, and pytest-xdist's workers with it) costs
# one folder, not the rest; pytest-xdist inside a folder where installed.
xdist=()
"$py" -c 'import xdist' 2>/dev/null && xdist=(-n "$((jobs > 8 ? 8 : jobs))")
parts=(tests/python/*/)
parts=("${parts[@]%/}" "tests/python/test_*.py")
: > "$out/suite.log"
for part in "${parts[@]}"; do
  [[ "$(basename "$part")" == __pycache__ ]] && continue
  # shellcheck disable=SC2086  (the glob of top-level files expands here)
  step "suite: $part" 300 "$out/suite_part.log" "$py" -m pytest $part -q -p no:cacheprovider \
    --tb=short -rfE "${xdist[@]}"
  { echo "=== $part"; cat "$out/suite_part.log"; } >> "$out/suite.log"
  tail -1 "$out/suite_part.log" >> "$out/summary.txt"
  (( budget - (SECONDS - start) < 20 )) && { say "suite: out of time after $part"; break; }
done
rm -f "$out/suite_part.log"
say "done in $((SECONDS - start)) s"
