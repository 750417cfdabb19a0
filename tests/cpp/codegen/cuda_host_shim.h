// Lets a source printed by compiler/codegen/cuda_printer.h compile as host C++
// (g++ -include this file), so that a test can run a CUDA kernel's whole grid
// on the CPU: set gridDim/blockDim, then call the __global__ function once
// per (blockIdx, threadIdx). The CUDA names the printer uses map to the host's
// equivalents: the math functions are libm's (the interpreter's), the bit
// casts are memcpy.
#pragma once

#include <math.h>

#include <cstring>

#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__ __restrict

struct mf_shim_dim3 {
  unsigned int x = 0, y = 0, z = 0;
};
inline mf_shim_dim3 blockIdx, threadIdx, blockDim, gridDim;

inline float __int_as_float(int bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline double __longlong_as_double(long long bits) {
  double d;
  std::memcpy(&d, &bits, sizeof d);
  return d;
}
