// What the runtime asks of the compiler at run time: printing a program's
// kernels as C++ from their kernel IR (the C++/OpenMP host back end prints
// at load time, since kernel IR is what a program value carries).
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

namespace metafuse::runtime {

// The C++ source of one kernel (entry point `mf_<name>`), printed from its
// kernel IR text; the error names what in the IR is wrong.
using CppKernelPrinter =
    std::function<absl::StatusOr<std::string>(const std::string& name, const std::string& kernel_ir)>;

struct KernelPrinterService {
  std::string cpp_prelude;  // printed once before every kernel of a library
  CppKernelPrinter print_cpp_kernel;
};

// Registered once per process by the compiler (a later call replaces it).
void RegisterKernelPrinterService(KernelPrinterService service);

// The registered service, or FailedPrecondition saying that `purpose` needs
// the compiler and this process has only the runtime.
absl::StatusOr<const KernelPrinterService*> GetKernelPrinterService(const std::string& purpose);

// Forgets the registered service (tests of a runtime-only process).
void UnregisterKernelPrinterServiceForTesting();

}  // namespace metafuse::runtime
