// How the multi-tensor (foreach-style) optimizer ops split work: the tensors
// of a list are laid end to end as one range [0, total) of elements, any
// chunk [begin, end) of that range (one at::parallel_for task) is cut at
// tensor boundaries into segments, and each segment runs the element loop.
// So one parallel region covers a whole parameter list, whatever the sizes.
// Torch-free and header-only: unit-tested on its own.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace metafuse::kernels {

// offsets[k] = first element of tensor k in the joint range; back() = total.
inline std::vector<int64_t> SegmentOffsets(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> offsets(sizes.size() + 1, 0);
  for (size_t k = 0; k < sizes.size(); ++k) {
    offsets[k + 1] = offsets[k] + sizes[k];
  }
  return offsets;
}

// Calls fn(tensor k, local begin, local end) for every non-empty piece of
// [begin, end) in tensor order. Empty tensors are skipped.
template <typename Fn>
void ForEachSegment(const std::vector<int64_t>& offsets, int64_t begin,
                    int64_t end, Fn&& fn) {
  // The last tensor whose first element is <= begin.
  auto it = std::upper_bound(offsets.begin(), offsets.end(), begin);
  // max(..., 0): begin >= 0 = offsets[0] already guarantees it; saying so
  // keeps the compiler from reasoning about offsets[-1].
  int64_t k = std::max<int64_t>(static_cast<int64_t>(it - offsets.begin()) - 1, 0);
  const int64_t num_tensors = static_cast<int64_t>(offsets.size()) - 1;
  for (; k < num_tensors && offsets[k] < end; ++k) {
    const int64_t lo = std::max(begin, offsets[k]) - offsets[k];
    const int64_t hi = std::min(end, offsets[k + 1]) - offsets[k];
    if (hi > lo) fn(k, lo, hi);
  }
}

}  // namespace metafuse::kernels
