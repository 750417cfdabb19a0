// Every element is visited exactly once: by the CPU multi-tensor chunking
// (any chunk boundaries, odd sizes, empty tensors) and by the CUDA kernels'
// grid-stride loop (n = 1024k + 1..3 included), checked on the host.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/cuda/launch_geometry.h"
#include "kernels/multi_tensor.h"

namespace metafuse::kernels {
namespace {

TEST(MultiTensorPartition, ChunksCoverEveryElementOnce) {
  const std::vector<int64_t> sizes = {0, 1, 3, 1025, 0, 4097, 7, 1};
  const std::vector<int64_t> offsets = SegmentOffsets(sizes);
  ASSERT_EQ(offsets.back(), 5134);
  for (int64_t chunk : {1, 2, 3, 7, 64, 1000, 5133, 5134, 100000}) {
    std::vector<std::vector<int>> seen(sizes.size());
    for (size_t k = 0; k < sizes.size(); ++k) seen[k].assign(sizes[k], 0);
    for (int64_t begin = 0; begin < offsets.back(); begin += chunk) {
      const int64_t end = std::min(begin + chunk, offsets.back());
      ForEachSegment(offsets, begin, end, [&](int64_t k, int64_t lo, int64_t hi) {
        ASSERT_LT(lo, hi);
        ASSERT_LE(hi, sizes[k]);
        for (int64_t i = lo; i < hi; ++i) ++seen[k][i];
      });
    }
    for (size_t k = 0; k < sizes.size(); ++k) {
      for (int64_t i = 0; i < sizes[k]; ++i) {
        ASSERT_EQ(seen[k][i], 1) << "chunk " << chunk << " tensor " << k
                                 << " element " << i;
      }
    }
  }
}

TEST(MultiTensorPartition, EmptyListAndEmptyRange) {
  const std::vector<int64_t> offsets = SegmentOffsets({});
  int calls = 0;
  ForEachSegment(offsets, 0, 0, [&](int64_t, int64_t, int64_t) { ++calls; });
  EXPECT_EQ(calls, 0);
}

// Emulates the kernels' loop: thread (b, t) visits FirstIndex, +Stride, ...
std::vector<int> Visits(int64_t n, const cuda::Geometry& g) {
  std::vector<int> seen(n, 0);
  for (unsigned b = 0; b < g.grid; ++b) {
    for (unsigned t = 0; t < g.block; ++t) {
      for (int64_t i = cuda::FirstIndex(b, g.block, t); i < n;
           i += cuda::Stride(g.grid, g.block)) {
        ++seen[i];
      }
    }
  }
  return seen;
}

TEST(CudaLaunchGeometry, CoversTheTailThatTorchOptDrops) {
  for (int64_t k : {0, 1, 3}) {
    for (int64_t extra : {0, 1, 2, 3}) {
      const int64_t n = 1024 * k + extra;
      const cuda::Geometry g = cuda::ElementwiseGeometry(n);
      if (n == 0) {
        EXPECT_EQ(g.grid, 0u);
        continue;
      }
      EXPECT_GE(static_cast<int64_t>(g.grid) * g.block, n) << "n = " << n;
      const std::vector<int> seen = Visits(n, g);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(seen[i], 1) << "n = " << n << ", element " << i;
      }
    }
  }
}

TEST(CudaLaunchGeometry, CappedGridStillCoversEverything) {
  // A grid capped at 3 blocks of 4 threads over 1024 * 2 + 3 elements.
  const int64_t n = 2051;
  const cuda::Geometry g = cuda::ElementwiseGeometry(n, 4, 3);
  EXPECT_EQ(g.grid, 3u);
  const std::vector<int> seen = Visits(n, g);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[i], 1) << "element " << i;
}

}  // namespace
}  // namespace metafuse::kernels
