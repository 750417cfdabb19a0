// runtime/compute/max_pool (plane by plane) against ATen's max_pool2d_with_indices
// on the Omniglot net's pooling shapes, float32, 1 thread: the median of
// alternating timed calls, outputs allocated by each call (as in a
// program), and the same with the page faults of fresh outputs excluded
// (outputs reused: ATen's out= variant).
//   bazel run //bench:max_pool_bench
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "runtime/compute/max_pool.h"

namespace {
template <typename F>
double MedianMs(F f, int reps = 15) {
  std::vector<double> t;
  f();
  for (int r = 0; r < reps; ++r) {
    auto a = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a)
                    .count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}
}  // namespace

int main() {
  at::set_num_threads(1);
  const std::vector<std::vector<int64_t>> shapes = {
      {75, 64, 28, 28}, {75, 64, 14, 14}, {75, 64, 7, 7}, {5, 64, 28, 28}, {5, 64, 14, 14}};
  std::printf("%-18s %10s %10s %8s   %10s %10s %8s\n", "input", "aten ms", "planes ms", "ratio",
              "aten out=", "planes*", "ratio");
  for (const auto& s : shapes) {
    at::Tensor x = at::randn(s);
    auto aten = [&] { return at::max_pool2d_with_indices(x, {2, 2}, {2, 2}, {0, 0}, {1, 1}); };
    auto planes = [&] { return metafuse::runtime::MaxPool2dByPlanes(x, {2, 2}); };
    auto [v, i] = aten();
    auto [pv, pi] = planes();
    if (!at::equal(v, pv) || !at::equal(i, pi)) {
      std::printf("MISMATCH at %s\n", c10::str(x.sizes()).c_str());
      return 1;
    }
    const double a = MedianMs(aten), p = MedianMs(planes);
    at::Tensor ov = at::empty_like(v), oi = at::empty_like(i);
    const double ao = MedianMs([&] {
      at::max_pool2d_with_indices_out(ov, oi, x, {2, 2}, {2, 2}, {0, 0}, {1, 1});
    });
    // The kernel alone: the same call once its outputs' pages exist (the
    // allocator reuses the freed block of the previous call).
    const double po = MedianMs([&] { planes(); });
    std::printf("%-18s %10.3f %10.3f %7.2fx   %10.3f %10.3f %7.2fx\n",
                c10::str(x.sizes()).c_str(), a, p, a / p, ao, po, ao / po);
  }
  return 0;
}
