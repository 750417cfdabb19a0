// Launch geometry of metafuse's element-wise CUDA kernels, as host code that
// the tests run without a GPU. Every kernel walks its elements with
// FirstIndex/Stride (a grid-stride loop), so any grid covers every element:
// no "n = 1024k + 1..3 loses the tail" (TorchOpt's kernel did).
#pragma once

#include <algorithm>
#include <cstdint>

#if defined(__CUDACC__)
#define MF_GEOM_HD __host__ __device__ __forceinline__
#else
#define MF_GEOM_HD inline
#endif

namespace metafuse::kernels::cuda {

constexpr int kBlockSize = 256;
// Enough blocks to fill an H100/H200 many times over; beyond, threads loop.
constexpr int64_t kMaxBlocks = 65535;

struct Geometry {
  unsigned grid = 0;
  unsigned block = 0;
};

// ceil(n / block) blocks, capped (the grid-stride loop covers the rest).
// n = 0 gives an empty grid, which callers must not launch.
inline Geometry ElementwiseGeometry(int64_t n, int block = kBlockSize,
                                    int64_t max_blocks = kMaxBlocks) {
  Geometry g;
  g.block = static_cast<unsigned>(block);
  const int64_t blocks = (n + block - 1) / block;
  g.grid = static_cast<unsigned>(std::min<int64_t>(blocks, max_blocks));
  return g;
}

MF_GEOM_HD int64_t FirstIndex(unsigned block_idx, unsigned block_dim,
                              unsigned thread_idx) {
  return static_cast<int64_t>(block_idx) * block_dim + thread_idx;
}

MF_GEOM_HD int64_t Stride(unsigned grid_dim, unsigned block_dim) {
  return static_cast<int64_t>(grid_dim) * block_dim;
}

}  // namespace metafuse::kernels::cuda
