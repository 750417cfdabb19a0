#!/usr/bin/env bash
# Builds the libFuzzer harnesses of tests/fuzz/ (clang, AddressSanitizer +
# UndefinedBehaviorSanitizer) and runs each on its seed corpus for a bounded
# time, one after the other; prints executions and coverage per harness.
#
#   tools/fuzz.sh [SECONDS_PER_HARNESS] [HARNESS...]   # default: 20 s, all
#   tools/fuzz.sh --build-only
#
# The harnesses link only the loader they test (its sources compiled here,
# LibTorch and Abseil from Debian), not the Bazel workspace, whose toolchain
# stays gcc. Objects are kept in $METAFUSE_FUZZ_BUILD (default build/fuzz)
# and rebuilt when a source or a header they include changes. Inputs that
# grow coverage go to $METAFUSE_FUZZ_WORK/<harness>/ (default /tmp/
# metafuse-fuzz), never into the committed seeds; a crash, leak, timeout
# or sanitizer report leaves its input there and fails the script.
# Extra libFuzzer flags: $FUZZ_FLAGS (e.g. "-max_len=4096"; not -jobs, whose
# logs go elsewhere).
set -euo pipefail
cd "$(dirname "$0")/.."

CXX=${CXX_FUZZ:-clang++}
BUILD=${METAFUSE_FUZZ_BUILD:-build/fuzz}
WORK=${METAFUSE_FUZZ_WORK:-/tmp/metafuse-fuzz}
SANITIZE="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
CXXFLAGS="-std=c++17 -O1 -g $SANITIZE -I. -I/usr/include/torch/csrc/api/include -Wno-unused-command-line-argument"

ABSL="-labsl_statusor -labsl_status -labsl_cord -labsl_cord_internal -labsl_cordz_functions
      -labsl_cordz_handle -labsl_cordz_info -labsl_str_format_internal -labsl_strings
      -labsl_strings_internal -labsl_int128 -labsl_base -labsl_raw_logging_internal
      -labsl_log_severity -labsl_spinlock_wait -labsl_throw_delegate"

# harness -> the loader's sources it links | the libraries they need.
declare -A SPEC=(
  [program_serialization]="runtime/program_value/program_serialization.cc runtime/program_value/pickle_archive_check.cc
    runtime/program_value/program_code.cc runtime/base/revolve_schedule.cc
    | -ltorch -ltorch_cpu -lc10 -lpthread -lz"
  [artifact_archive]="runtime/program_value/artifact_archive.cc | -lcrypto"
  [shared_object]="runtime/jit/shared_object.cc | -ldl"
  [kernel_ir_parser]="compiler/codegen/kernel_ir_parser.cc compiler/codegen/kernel_ir.cc |"
  [kernel_cache]="runtime/base/kernel_cache.cc runtime/base/options.cc | -lc10"
  [tree_serialization]="tree/serialization.cc tree/literal.cc tree/tree_spec.cc |"
)
ALL=(program_serialization artifact_archive shared_object kernel_ir_parser kernel_cache
     tree_serialization)

# An object is stale when it is missing or older than its source or any
# header its dependency file names.
stale() {
  local object=$1 deps=$1.d
  [ -f "$object" ] && [ -f "$deps" ] || return 0
  local f
  for f in $(sed -e 's/\\$//' -e 's/^[^:]*://' "$deps"); do
    [ "$f" -nt "$object" ] && return 0
  done
  return 1
}

compile() {  # source -> object (sanitized; the harness also gets -fsanitize=fuzzer)
  local source=$1 object=$BUILD/obj/${1%.cc}.o extra=${2:-}
  mkdir -p "$(dirname "$object")"
  if stale "$object"; then
    echo "fuzz: compiling $source" >&2
    nice -n 10 $CXX $CXXFLAGS $extra -MMD -MF "$object.d" -c "$source" -o "$object"
  fi
  echo "$object"
}

build() {
  local h=$1 objects=() s
  for s in ${SPEC[$h]%|*}; do objects+=("$(compile "$s" -fsanitize=fuzzer-no-link)"); done
  objects+=("$(compile "tests/fuzz/${h}_fuzzer.cc" -fsanitize=fuzzer)")
  local binary=$BUILD/${h}_fuzzer newest=0 o
  for o in "${objects[@]}"; do [ "$o" -nt "$binary" ] && newest=1; done
  if [ ! -x "$binary" ] || [ $newest = 1 ]; then
    echo "fuzz: linking $binary" >&2
    # shellcheck disable=SC2086  # the library lists are word lists
    nice -n 10 $CXX $SANITIZE -fsanitize=fuzzer "${objects[@]}" -o "$binary" ${SPEC[$h]#*|} $ABSL
  fi
}

seconds=20
if [ "${1:-}" = "--build-only" ]; then
  seconds=0
  shift
elif [[ "${1:-}" =~ ^[0-9]+$ ]]; then
  seconds=$1
  shift
fi
harnesses=("$@")
[ ${#harnesses[@]} -gt 0 ] || harnesses=("${ALL[@]}")
for h in "${harnesses[@]}"; do
  [ -n "${SPEC[$h]+x}" ] || { echo "fuzz: no harness '$h' (one of: ${ALL[*]})" >&2; exit 2; }
  build "$h"
done
[ "$seconds" -gt 0 ] || exit 0

status=0
printf '%-22s %12s %8s %6s %6s  %s\n' harness executions seconds cov ft result
for h in "${harnesses[@]}"; do
  mkdir -p "$WORK/$h/corpus" "$WORK/$h/artifacts"
  log=$WORK/$h/fuzz.log
  # -rss_limit_mb: LibTorch alone takes ~400 MB; an input that makes a
  # loader allocate past 2 GB is a finding. -timeout: one input, 10 s.
  # shellcheck disable=SC2086
  if nice -n 10 "$BUILD/${h}_fuzzer" -max_total_time="$seconds" -timeout=10 \
      -rss_limit_mb=2560 -malloc_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$WORK/$h/artifacts/" ${FUZZ_FLAGS:-} \
      "$WORK/$h/corpus" "tests/fuzz/corpus/$h" >"$log" 2>&1; then
    result=ok
  else
    result="FAILED: see $log and $WORK/$h/artifacts/"
    status=1
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  took=$(sed -n 's/.*Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -1)
  if [ -z "$took" ] && [ -n "$runs" ]; then  # stopped early by a finding
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    took=$((runs / (${rate:-1} > 0 ? ${rate:-1} : 1)))
  fi
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  printf '%-22s %12s %8s %6s %6s  %s\n' "$h" "${runs:-?}" "${took:-$seconds}" "${cov:-?}" \
    "${ft:-?}" "$result"
done
exit $status
