// The system C++ compiler as a code generator: the C++/OpenMP back end
// (compiler/codegen/cpp_printer.h) prints kernels as C++, and this compiles
// such a source into a shared object the runtime loads with dlopen
// (runtime/jit/shared_object.h). It is the host back end of builds without LLVM
// and what ahead-of-time artifacts carry next to LLVM's object code.
//
// Code is compiled for an x86-64 micro-architecture level ("x86-64-v3":
// AVX2 and FMA, ...), the highest this CPU supports, instead of
// -march=native: a level is a name another CPU can be checked against
// before it loads the code (CpuCanRun).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace metafuse::runtime {

// Flags for kernel sources: the printer's exactness flags (no FP
// contraction, no fast-math), -fopenmp-simd for its `simd` loops (threads
// come from the runtime's chunked loop, not from the library), PIC.
inline constexpr char kSharedObjectFlags[] =
    "-std=c++17 -O2 -fopenmp-simd -ffp-contract=off -fno-math-errno -fno-trapping-math "
    "-shared -fPIC";

// The compiler: $METAFUSE_CXX, else the first of c++, g++, clang++ on PATH.
// The error says what was looked for and how to choose one.
absl::StatusOr<std::string> FindHostCompiler();

// "<compiler path>: <first line of its --version>", for cache keys and
// artifact versions (asked once per compiler per process).
absl::StatusOr<std::string> HostCompilerVersion();

// The code target of this CPU: "x86-64-v4", "x86-64-v3", "x86-64-v2",
// "x86-64" or, on other architectures, "<arch> baseline".
std::string HostCodeTarget();

// The -march flag for `target` ("" for a baseline target).
std::string MarchFlagFor(const std::string& target);

// OK when this CPU runs code compiled for `target`; else what it lacks.
absl::Status CpuCanRun(const std::string& target);

// Compiles `source` (a complete translation unit) with kSharedObjectFlags
// and MarchFlagFor(HostCodeTarget()) into a shared object, returned as its
// bytes. Runs the compiler in a private temporary directory, removed after.
// A failure carries the compiler's diagnostics (first lines) and `label`.
absl::StatusOr<std::string> CompileSharedObject(const std::string& source,
                                                const std::string& label);

}  // namespace metafuse::runtime
