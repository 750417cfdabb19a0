// Test helper: a kernel-IR kernel printed for the host and loaded by the
// runtime's JIT, as the pipeline and the runtime do it in two steps.
#pragma once

#include <memory>

#include "compiler/codegen/llvm_printer.h"
#include "runtime/jit/jit_kernel.h"

namespace metafuse::codegen::testing {

inline absl::StatusOr<std::unique_ptr<runtime::JitKernel>> CompileHostKernel(
    const kir::Kernel& kernel, runtime::KernelCache* cache = nullptr,
    std::shared_ptr<runtime::LlvmJit> jit = nullptr, bool own_jit = true) {
  auto code = HostKernelCode(kernel);
  if (!code.ok()) return code.status();
  if (own_jit && jit == nullptr) return runtime::JitKernel::Create(*code, cache);
  return runtime::JitKernel::Create(*code, cache, std::move(jit));
}

}  // namespace metafuse::codegen::testing
