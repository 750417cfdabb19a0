#!/usr/bin/env bash
# The C++ tests that run under AddressSanitizer + UndefinedBehaviorSanitizer
# (`--config=asan`, .bazelrc) in CI: the pytree core (TreeSpec
# deserialization), the kernel IR and its parser, the runtime's loaders
# (kernel cache, artifact signatures, kernels rebuilt from their kernel IR,
# the runtime-only printer service), its small GEMMs, and the kernels'
# partition and element-backward loops. Left out: tests that link LLVM or
# the compiler, and the fused optimizers' tests (every kernel and the
# optimizer core: their sanitized cold build alone takes longer than the
# rest together on CI's 2 cores; docs/fuzzing.md has the measurements).
#   tools/asan_tests.sh [extra bazel flags]
set -euo pipefail
cd "$(dirname "$0")/.."
TESTS=(
  //tests/cpp/tree:tree_spec_test
  //tests/cpp/tree:ivalue_tree_test
  //tests/cpp/codegen:kernel_ir_test
  //tests/cpp/codegen:kernel_ir_parser_test
  //tests/cpp/runtime:kernel_cache_test
  //tests/cpp/runtime:artifact_signature_test
  //tests/cpp/runtime:kernel_ir_rebuild_test
  //tests/cpp/runtime:revolve_schedule_test
  //tests/cpp/runtime:timing_rule_test
  //tests/cpp/runtime:small_gemm_test
  //tests/cpp/runtime:kernel_target_test
  //tests/cpp/runtime:llvm_jit_unavailable_test
  //tests/cpp/runtime:runtime_only_test
  //tests/cpp/kernels:partition_test
  //tests/cpp/kernels:element_backward_test
)
bazel test --config=asan "$@" "${TESTS[@]}"
