// How an untrusted ahead-of-time artifact runs (docs/aot.md, "Trust"): its
// native code replaced by code this process prints from its kernel IR.
//
// Kernel IR is data (a flat element loop over a scalar expression DAG,
// compiler/codegen/kernel_ir.h) that the compiler's printers parse and
// validate; LLVM IR, object code, shared objects and CUDA C are code. So an
// artifact that is not trusted keeps only its kernels' IR: every kernel's
// LLVM IR (host) or CUDA C (CUDA tensors) is printed afresh by the
// compiler's kernel printer service (kernel_printer_service.h), its launch
// contract checked against the one the IR gives, its object code dropped,
// and every program's shared object dropped. The back end then compiles the
// printed code here (or takes it from this user's kernel cache).
#pragma once

#include "absl/status/status.h"
#include "runtime/program_value/program_code.h"

namespace metafuse::runtime {

// Rebuilds `program`'s kernels from their kernel IR as above. Fails, naming
// the kernel, when a kernel has no kernel IR, its IR does not print, or its
// contract differs from its IR's; and when this process has no compiler (a
// runtime-only process such as the C++ runner) and the program has kernels.
// On failure `program` is unchanged.
absl::Status RebuildKernelsFromKernelIr(CompiledProgram& program);

}  // namespace metafuse::runtime
