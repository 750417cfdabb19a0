// Which GEMM runs a small product on this machine: runtime/compute/small_gemm's
// micro-kernels or the BLAS LibTorch loaded. Neither wins everywhere, and
// the winner depends on the CPU (on a Zen 4 core, where AVX-512 is two
// 256-bit halves, OpenBLAS is faster on the sinusoid's 10x40x40 products and
// 4x faster on its single-column ones; docs/benchmarks.md), so a fixed rule
// is wrong somewhere. The first product of each shape times both (a cost
// check, a few hundred microseconds once) and keeps the faster.
//
// The choice is kept per process and on disk (runtime/tuning/measured_choice: one
// file per CPU model and BLAS library), so every process on the machine
// runs the same kernel for a shape and computes the same bits: distributed
// workers' block sums stay bitwise equal to the caller's.
//
// METAFUSE_SMALL_GEMM=auto (the default) measures; `always` takes
// runtime/compute/small_gemm wherever PreferSmallGemm allows it, `never` the BLAS;
// any other value is an error naming the variable.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace metafuse::runtime {

enum class GemmKernel { kBlas, kSmall };

struct GemmShape {
  bool f64 = false, trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  std::string Key() const;  // e.g. "f32 0 1 10 40 40"
};

// Seconds of one product of `shape` with `kernel` (one timed loop; the
// choice alternates the kernels three times and keeps each one's best);
// the caller owns the BLAS and the operands.
using GemmTimer = std::function<double(GemmKernel)>;

// The kernel for `shape`: from this process's table, else the machine's
// file, else measured with `time` and recorded in both. Only shapes that
// PreferSmallGemm admits are measured; the rest run on the BLAS.
// `blas_library` names the BLAS (its file), part of the file's identity.
GemmKernel ChooseGemmKernel(const GemmShape& shape, const std::string& blas_library,
                            const GemmTimer& time);

// The file the choices for `blas_library` on this CPU are kept in (""
// when the cache directory is not usable: the choices then last one
// process).
std::string GemmChoiceFile(const std::string& blas_library);

// Forgets this process's table (tests).
void ClearGemmChoicesForTesting();

}  // namespace metafuse::runtime
