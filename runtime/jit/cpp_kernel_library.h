// The C++/OpenMP host back end: the fused kernels of a program, printed as
// C++ from their kernel IR (by the compiler's printer, registered through
// runtime/jit/kernel_printer_service.h), compiled
// together into one shared object by the system compiler
// (runtime/jit/host_compiler.h), cached like LLVM's object files, and loaded
// with dlopen (runtime/jit/shared_object.h). One compiler run per program, not
// per kernel: starting the compiler costs more than compiling a kernel.
//
// It runs the same entry points as the LLVM back end
// (`mf_<name>(begin, end, inputs, outputs, scalars)`), with the same
// rounding (no contraction, metafuse's exp), so both give the same bits.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/base/kernel_cache.h"
#include "runtime/program_value/program_code.h"
#include "runtime/jit/shared_object.h"

namespace metafuse::runtime {

using HostKernelFn = void (*)(int64_t begin, int64_t end, void* const* inputs,
                              void* const* outputs, const double* scalars);

struct CppKernelLibrary {
  std::shared_ptr<SharedObject> object;
  std::string bytes;   // the shared object (what artifacts carry)
  std::string target;  // the HostCodeTarget() it was compiled for
  bool cache_hit = false;
  double compile_seconds = 0;
  std::map<std::string, HostKernelFn> functions;  // kernel name -> entry point
};

// The one translation unit for `kernels` (duplicates by name printed once),
// printed by the compiler's registered printer
// (runtime/jit/kernel_printer_service.h); without one, FailedPrecondition.
absl::StatusOr<std::string> PrintCppLibrarySource(const std::vector<const KernelCode*>& kernels);

// What shaped the code besides the source: back end, compiler, flags.
absl::StatusOr<std::string> CppCodegenVersions();

// Prints, compiles (or finds in `cache`, may be null) and loads `kernels`.
absl::StatusOr<CppKernelLibrary> BuildCppKernelLibrary(
    const std::vector<const KernelCode*>& kernels, KernelCache* cache);

// Loads a shared object built for `kernels` elsewhere (an artifact's), after
// checking that this CPU runs code for `target` (CpuCanRun); needs no
// compiler. The error says which check failed.
absl::StatusOr<CppKernelLibrary> LoadCppKernelLibrary(
    const std::vector<const KernelCode*>& kernels, const std::string& bytes,
    const std::string& target);

}  // namespace metafuse::runtime
