// The widest x86 vector instruction set this CPU runs, for code built
// several times with target attributes (runtime/compute/small_gemm.cc,
// runtime/compute/max_pool.cc) that picks its version at run time.
#pragma once

namespace metafuse::runtime {

enum class Isa { kSse2, kAvx2, kAvx512 };

inline Isa BestIsa() {
  static const Isa isa = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl"))
      return Isa::kAvx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::kAvx2;
    return Isa::kSse2;
  }();
  return isa;
}

}  // namespace metafuse::runtime
