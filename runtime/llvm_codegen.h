// Kernel IR -> LLVM IR text -> host code through LlvmJit, run in
// OpenMP-parallel chunks.
//
// The printed module defines
//   void mf_<name>(int64_t begin, int64_t end, void* const* inputs,
//                  void* const* outputs, const double* scalars)
// which runs elements [begin, end). It loads the buffer pointers and calls an
// internal always-inline body whose buffer parameters are noalias, so after
// inlining the loop vectorizer sees independent buffers and vectorizes for
// the host's vector width without runtime alias checks. No fast-math flags:
// results match the reference interpreter (kernel_ir.h) bit for bit: exp is
// runtime/kernel_math.h's arithmetic in both, and log, tanh and pow call the
// process's libm, as the interpreter does.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/kernel_cache.h"
#include "runtime/kernel_ir.h"
#include "runtime/llvm_jit.h"

namespace metafuse::runtime {

// The JIT symbol of a kernel's entry point: "mf_" + name.
std::string LlvmKernelSymbol(const kir::Kernel& kernel);

// The kernel as an LLVM 14 module (typed pointers). Validates first.
absl::StatusOr<std::string> PrintLlvmIr(const kir::Kernel& kernel);

// The cache-key parts for LLVM-compiled kernels: the host CPU name and its
// enabled features, and the code generator + LLVM versions.
std::string LlvmHostTarget();
std::string LlvmCodegenVersions();

class CompiledKernel {
 public:
  using Fn = void (*)(int64_t begin, int64_t end, void* const* inputs,
                      void* const* outputs, const double* scalars);
  static constexpr int64_t kDefaultGrain = 1 << 15;

  // JITs `kernel` in a JIT of its own. With a cache, the key is the kernel's
  // printed text + LlvmHostTarget() + LlvmCodegenVersions() and the artifact
  // is the printed LLVM IR plus the object file LLVM emitted for the host: a
  // hit skips validation, printing, optimization and code generation and
  // only links the object (optimized_ir() is then empty).
  static absl::StatusOr<std::unique_ptr<CompiledKernel>> Create(
      const kir::Kernel& kernel, KernelCache* cache = nullptr);
  // The same, adding the kernel to `jit`, shared with other kernels (one JIT
  // per process costs its setup once). Kernels sharing a JIT need distinct
  // names.
  static absl::StatusOr<std::unique_ptr<CompiledKernel>> Create(
      const kir::Kernel& kernel, KernelCache* cache, std::shared_ptr<LlvmJit> jit);

  // Runs over [0, n): chunks of `grain` elements in an OpenMP parallel loop
  // (one direct call when n <= grain). Checks counts, null buffers and
  // overlaps: an output may share memory only with an input it fully
  // coincides with (same address, dtype, elementwise access: in place).
  absl::Status Run(int64_t n, const std::vector<const void*>& inputs,
                   const std::vector<void*>& outputs,
                   const std::vector<double>& scalars,
                   int64_t grain = kDefaultGrain) const;
  // The same without checks.
  void RunUnchecked(int64_t n, const void* const* inputs, void* const* outputs,
                    const double* scalars, int64_t grain = kDefaultGrain) const;

  Fn function() const { return fn_; }
  const kir::Kernel& kernel() const { return kernel_; }
  const std::string& llvm_ir() const { return ir_; }
  // The module after LLVM's O2 pipeline for the host (vector types show
  // that the loop vectorized).
  const std::string& optimized_ir() const { return optimized_ir_; }
  bool cache_hit() const { return cache_hit_; }
  double compile_seconds() const { return compile_seconds_; }

 private:
  CompiledKernel() = default;
  kir::Kernel kernel_;
  std::shared_ptr<LlvmJit> jit_;
  Fn fn_ = nullptr;
  std::string ir_, optimized_ir_;
  bool cache_hit_ = false;
  double compile_seconds_ = 0;
};

}  // namespace metafuse::runtime
