// A fused kernel made runnable on the host and run in OpenMP-parallel
// chunks. Two back ends make it (runtime/jit/host_backend.h): LLVM — its LLVM IR
// (KernelCode, printed by compiler/codegen/llvm_printer.h) compiled by
// LlvmJit, or its object file linked from the kernel cache or an artifact —
// and C++/OpenMP — its entry point in a shared object the system compiler
// built (runtime/jit/cpp_kernel_library.h).
//
// The entry point is
//   void mf_<name>(int64_t begin, int64_t end, void* const* inputs,
//                  void* const* outputs, const double* scalars)
// which runs elements [begin, end).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/jit/cpp_kernel_library.h"
#include "runtime/base/kernel_cache.h"
#include "runtime/jit/llvm_jit.h"
#include "runtime/program_value/program_code.h"
#include "runtime/jit/shared_object.h"

namespace metafuse::runtime {

// Whether object code made for `object_target` (an LlvmHostTarget() string)
// runs here: every CPU feature it was compiled with is present. The error
// names the features this CPU lacks.
absl::Status HostCanRun(const std::string& object_target);

class JitKernel {
 public:
  using Fn = HostKernelFn;
  static constexpr int64_t kDefaultGrain = 1 << 15;

  // Compiles `code` in a JIT of its own. With a cache, the key is the
  // kernel's LLVM IR + LlvmHostTarget() + LlvmCodegenVersions() and the
  // artifact is the object file LLVM emitted for the host: a hit skips
  // optimization and code generation and only links the object
  // (optimized_ir() is then empty).
  // A `code` carrying object_code links it (no LLVM) when this CPU can run
  // it (HostCanRun), and fails with the reason when it cannot.
  static absl::StatusOr<std::unique_ptr<JitKernel>> Create(const KernelCode& code,
                                                           KernelCache* cache = nullptr);
  // The same, adding the kernel to `jit`, shared with other kernels (one JIT
  // per process costs its setup once). Kernels sharing a JIT need distinct
  // names.
  static absl::StatusOr<std::unique_ptr<JitKernel>> Create(const KernelCode& code,
                                                           KernelCache* cache,
                                                           std::shared_ptr<LlvmJit> jit);

  // The kernel `code` names in `library` (C++/OpenMP back end), which it
  // keeps loaded.
  static absl::StatusOr<std::unique_ptr<JitKernel>> FromLibrary(const KernelCode& code,
                                                                const CppKernelLibrary& library);

  // Runs over [0, n): chunks of `grain` elements in an OpenMP parallel loop
  // (one direct call when n <= grain). Checks counts, null buffers and
  // overlaps: an output may share memory only with an input it fully
  // coincides with (same address, dtype, elementwise access: in place).
  absl::Status Run(int64_t n, const std::vector<const void*>& inputs,
                   const std::vector<void*>& outputs, const std::vector<double>& scalars,
                   int64_t grain = kDefaultGrain) const;
  // The same without checks.
  void RunUnchecked(int64_t n, const void* const* inputs, void* const* outputs,
                    const double* scalars, int64_t grain = kDefaultGrain) const;

  Fn function() const { return fn_; }
  // The host object file this kernel runs (from LLVM, the cache or the
  // program value's object_code); empty for the C++/OpenMP back end.
  const std::string& object_code() const { return object_; }
  const KernelCode& code() const { return code_; }
  // The module after LLVM's O2 pipeline for the host (vector types show
  // that the loop vectorized); empty after a cache hit.
  const std::string& optimized_ir() const { return optimized_ir_; }
  bool cache_hit() const { return cache_hit_; }
  double compile_seconds() const { return compile_seconds_; }

 private:
  JitKernel() = default;
  KernelCode code_;
  std::shared_ptr<LlvmJit> jit_;
  std::shared_ptr<SharedObject> library_;  // C++/OpenMP back end
  Fn fn_ = nullptr;
  std::string optimized_ir_;
  bool cache_hit_ = false;
  std::string object_;
  double compile_seconds_ = 0;
};

}  // namespace metafuse::runtime
