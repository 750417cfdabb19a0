// Kernel IR -> LLVM IR text for the host. The runtime compiles the text
// with LLVM ORC (runtime/jit/jit_kernel.h) and runs it in OpenMP-parallel chunks.
//
// The printed module defines
//   void mf_<name>(int64_t begin, int64_t end, void* const* inputs,
//                  void* const* outputs, const double* scalars)
// which runs elements [begin, end). It loads the buffer pointers and calls an
// internal always-inline body whose buffer parameters are noalias, so after
// inlining the loop vectorizer sees independent buffers and vectorizes for
// the host's vector width without runtime alias checks. No fast-math flags:
// results match the reference interpreter (kernel_ir.h) bit for bit: exp is
// compiler/codegen/kernel_math.h's arithmetic in both, and log, tanh and pow call the
// process's libm, as the interpreter does.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/codegen/kernel_ir.h"
#include "runtime/program_value/program_code.h"

namespace metafuse::codegen {

// The JIT symbol of a kernel's entry point: "mf_" + name.
std::string LlvmKernelSymbol(const kir::Kernel& kernel);

// The kernel as an LLVM 14 module (typed pointers). Validates first.
absl::StatusOr<std::string> PrintLlvmIr(const kir::Kernel& kernel);

// The host kernel as the runtime loads it (runtime/jit/jit_kernel.h): the
// printed module, the kernel IR text and the launch contract. Validates.
absl::StatusOr<runtime::KernelCode> HostKernelCode(const kir::Kernel& kernel);

}  // namespace metafuse::codegen
