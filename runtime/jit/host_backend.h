// Which back end makes fused kernels runnable on the host: LLVM (JIT'd
// object code) or C++/OpenMP (the system compiler's shared object). Both run
// the same entry points with the same rounding; LLVM starts faster (no
// compiler process), C++ needs no LLVM in the build.
#pragma once

#include "absl/status/statusor.h"

namespace metafuse::runtime {

enum class HostBackend { kLlvm, kCpp };

// METAFUSE_HOST_BACKEND: "llvm" or "cpp"; unset, LLVM where the build has
// it, else C++. An unknown value, or "llvm" in a build without LLVM, is an
// error naming the variable and the values it takes.
absl::StatusOr<HostBackend> SelectedHostBackend();

const char* HostBackendName(HostBackend backend);

}  // namespace metafuse::runtime
