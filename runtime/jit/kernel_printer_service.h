// What the runtime asks of the compiler at run time: printing a program's
// kernels as C++ from their kernel IR (the C++/OpenMP host back end prints
// at load time, since kernel IR is what a program value carries), and
// printing a kernel's whole code afresh from its kernel IR (how an untrusted
// artifact runs: runtime/jit/kernel_ir_rebuild.h).
//
// The runtime never includes compiler/ (docs/architecture.md, the layering
// rule tests/python/test_layering.py checks). So the runtime defines this
// interface and the compiler registers its printer
// (compiler/codegen/kernel_printer_registration.cc, linked into every
// process that links the compiler: the Python extension, the compiler's
// tests). A process with only the runtime, such as the C++ runner of
// ahead-of-time artifacts, has no printer: it runs an artifact's object code
// or shared object, and refuses a kernel it would have to print with an error
// that says so.
#pragma once

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/program_value/program_code.h"

namespace metafuse::runtime {

// The C++ source of one kernel (entry point `mf_<name>`), printed from its
// kernel IR text; the error names what in the IR is wrong.
using CppKernelPrinter =
    std::function<absl::StatusOr<std::string>(const std::string& name, const std::string& kernel_ir)>;

// The kernel named `name` as a program runs it, printed from its kernel IR
// text: the launch contract, the IR text, and LLVM IR for the host or, when
// `cuda`, CUDA C. The error names what in the IR is wrong, or a kernel
// name that is not an identifier.
using KernelCodePrinter = std::function<absl::StatusOr<KernelCode>(
    const std::string& name, const std::string& kernel_ir, bool cuda)>;

struct KernelPrinterService {
  std::string cpp_prelude;  // printed once before every kernel of a library
  CppKernelPrinter print_cpp_kernel;
  KernelCodePrinter print_kernel_code;  // may be empty (then nothing is reprinted)
};

// Registered once per process by the compiler (a later call replaces it).
void RegisterKernelPrinterService(KernelPrinterService service);

// The registered service, or FailedPrecondition saying that `purpose` needs
// the compiler and this process has only the runtime.
absl::StatusOr<const KernelPrinterService*> GetKernelPrinterService(const std::string& purpose);

// Forgets the registered service (tests of a runtime-only process).
void UnregisterKernelPrinterServiceForTesting();

}  // namespace metafuse::runtime
