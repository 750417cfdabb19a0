// Kernel IR -> standalone C++17 source with OpenMP pragmas, for ahead-of-time
// artifacts. The source defines, with C linkage,
//   void mf_<name>(int64_t begin, int64_t end, void* const* inputs,
//                  void* const* outputs, const double* scalars)
// (the same entry point as compiler/codegen/llvm_printer.h) whose element loop is a
// `#pragma omp parallel for simd`. It needs only <cmath> and <cstdint>.
//
// Compile it with kCppCompileFlags (no fast-math, no FP contraction) to get
// the interpreter's results bit for bit (up to libm) from vectorized loops;
// -ffast-math trades that for speed.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "compiler/codegen/kernel_ir.h"

namespace metafuse::codegen {

// Flags for g++/clang++ (after -shared -fPIC for a loadable artifact):
// -fno-math-errno and -fno-trapping-math let the loops with sqrt, compares
// and exp vectorize and change no result; -ffp-contract=off keeps every
// rounding of the interpreter.
inline constexpr char kCppCompileFlags[] =
    "-std=c++17 -O2 -fopenmp -ffp-contract=off -fno-math-errno -fno-trapping-math";

// The includes every printed kernel needs; print it once per source file.
std::string CppPrelude();

// One kernel as a C++ function (validates first). Several kernels can be
// concatenated after one CppPrelude().
absl::StatusOr<std::string> PrintCppKernel(const kir::Kernel& kernel);

// CppPrelude() + PrintCppKernel(kernel).
absl::StatusOr<std::string> PrintCppSource(const kir::Kernel& kernel);

}  // namespace metafuse::codegen
