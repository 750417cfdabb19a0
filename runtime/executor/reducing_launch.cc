#include "runtime/executor/reducing_launch.h"

// The block sums are plain loops; -O2 (the build's) leaves them scalar.
#pragma GCC optimize("O3")

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include <c10/util/accumulate.h>

#include "absl/container/inlined_vector.h"

namespace metafuse::runtime {
namespace {

// Elements per block and thread: a few outputs of a block fit in L2.
constexpr int64_t kBlock = 8192;

// Access forms (codegen::kir::Access numbering).
constexpr int64_t kBroadcast = 1, kInner = 2, kOuter = 3, kMiddle = 4, kPeriodic = 5;

// A per-channel sum over planes smaller than this keeps one accumulator per
// element of the period (channels x plane) and folds the planes at the end:
// runs of a few elements would leave the vector loops idle.
constexpr int64_t kShortPlane = 256, kLargestPeriod = 1 << 16;

bool SumsByPeriod(const LaunchPlan::Reduction& r) {
  return r.access == kPeriodic && r.inner < kShortPlane && r.mid * r.inner <= kLargestPeriod;
}

// Number of reduced elements the form addresses over a loop of n; -1 when
// its sizes are not positive or the loop is not whole runs (outer) or
// periods (middle) of them: the last elements would land past the sums.
int64_t ReducedCount(const LaunchPlan::Reduction& r, int64_t n) {
  if (r.inner < 1 || r.mid < 1) return -1;
  switch (r.access) {
    case kBroadcast: return 1;
    case kInner: return r.inner;
    case kOuter: return n % r.inner == 0 ? n / r.inner : -1;
    case kMiddle: return n % (r.mid * r.inner) == 0 ? n / (r.mid * r.inner) * r.inner : -1;
    case kPeriodic: return r.mid;
  }
  return -1;
}

// One clone per x86-64 level: the sums below are memory-speed only in
// 256/512-bit registers.
#define MF_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))

// The sum of a run. Four independent vector accumulators hide the add
// latency; each lane sums count / (4 * lanes) values in the input's type
// (a few dozen for a conv plane) before the total goes to double.
template <typename V, typename T>
__attribute__((always_inline)) inline double SumLanes(const T* v, int64_t count) {
  constexpr int64_t kLanes = sizeof(V) / sizeof(T);
  V a0 = {}, a1 = {}, a2 = {}, a3 = {};
  int64_t k = 0;
  for (; k + 4 * kLanes <= count; k += 4 * kLanes) {
    V x0, x1, x2, x3;
    std::memcpy(&x0, v + k, sizeof(V));
    std::memcpy(&x1, v + k + kLanes, sizeof(V));
    std::memcpy(&x2, v + k + 2 * kLanes, sizeof(V));
    std::memcpy(&x3, v + k + 3 * kLanes, sizeof(V));
    a0 += x0, a1 += x1, a2 += x2, a3 += x3;
  }
  for (; k + kLanes <= count; k += kLanes) {
    V x0;
    std::memcpy(&x0, v + k, sizeof(V));
    a0 += x0;
  }
  const V a = (a0 + a1) + (a2 + a3);
  double s = 0.0;
  for (int64_t l = 0; l < kLanes; ++l) s += static_cast<double>(a[l]);
  for (; k < count; ++k) s += static_cast<double>(v[k]);
  return s;
}

typedef float F32x16 __attribute__((vector_size(64)));
typedef double F64x8 __attribute__((vector_size(64)));

MF_CLONES double SumRun(const float* v, int64_t count) { return SumLanes<F32x16>(v, count); }
MF_CLONES double SumRun(const double* v, int64_t count) { return SumLanes<F64x8>(v, count); }

MF_CLONES void AddRun(double* __restrict acc, const float* __restrict v, int64_t count) {
  for (int64_t k = 0; k < count; ++k) acc[k] += static_cast<double>(v[k]);
}
MF_CLONES void AddRun(double* __restrict acc, const double* __restrict v, int64_t count) {
  for (int64_t k = 0; k < count; ++k) acc[k] += v[k];
}

// Adds values[i - begin] for i in [begin, end) into acc at the reduced index
// of i. Runs of `inner` consecutive i share one reduced element (outer
// forms) or map to consecutive ones (inner forms).
template <typename T>
void Accumulate(const LaunchPlan::Reduction& r, const T* values, int64_t begin, int64_t end,
                double* acc) {
  if (r.access == kBroadcast) {
    acc[0] += SumRun(values, end - begin);
    return;
  }
  if (SumsByPeriod(r)) {  // acc holds mid * inner sums
    const int64_t period = r.mid * r.inner;
    for (int64_t i = begin; i < end;) {
      const int64_t run_end = std::min(end, (i / period + 1) * period);
      AddRun(acc + i % period, values + (i - begin), run_end - i);
      i = run_end;
    }
    return;
  }
  for (int64_t i = begin; i < end;) {
    const int64_t run_end = std::min(end, (i / r.inner + 1) * r.inner);
    const T* v = values + (i - begin);
    switch (r.access) {
      case kOuter: acc[i / r.inner] += SumRun(v, run_end - i); break;
      case kPeriodic: acc[i / r.inner % r.mid] += SumRun(v, run_end - i); break;
      case kInner: AddRun(acc + i % r.inner, v, run_end - i); break;
      case kMiddle:
        AddRun(acc + i / (r.mid * r.inner) * r.inner + i % r.inner, v, run_end - i);
        break;
    }
    i = run_end;
  }
}

}  // namespace

std::vector<at::Tensor> RunReducing(const JitKernel& kernel, int64_t n,
                                    const void* const* inputs, void* const* outputs,
                                    const double* scalars,
                                    const std::vector<c10::ScalarType>& output_dtypes,
                                    const std::vector<LaunchPlan::Reduction>& reductions) {
  const std::string& name = kernel.code().name;
  const size_t num_outputs = output_dtypes.size();
  // Per reduction: its result count and where its sums start in a thread's
  // accumulator array (per-period sums take mid * inner slots).
  absl::InlinedVector<int64_t, 4> counts, offsets;
  int64_t slots = 0;
  for (const LaunchPlan::Reduction& r : reductions) {
    const int64_t count = ReducedCount(r, n);
    TORCH_CHECK(r.source >= 0 && static_cast<size_t>(r.source) < num_outputs && count >= 0 &&
                    r.inner >= 1 && r.mid >= 1 && c10::multiply_integers(r.out_sizes) == count &&
                    (output_dtypes[r.source] == at::kFloat ||
                     output_dtypes[r.source] == at::kDouble),
                "metafuse: fused kernel ", name, ": a reduction (output ", r.source, ", access ",
                r.access, ", inner ", r.inner, ", mid ", r.mid, ") does not fit its loop of ",
                n, " elements");
    counts.push_back(count);
    offsets.push_back(slots);
    slots += SumsByPeriod(r) ? r.mid * r.inner : count;
  }
  int64_t num_scratch = 0;
  for (size_t o = 0; o < num_outputs; ++o) num_scratch += outputs[o] == nullptr ? 1 : 0;

  const int64_t blocks = (n + kBlock - 1) / kBlock;
  const int threads = n > JitKernel::kDefaultGrain
                          ? static_cast<int>(std::min<int64_t>(omp_get_max_threads(), blocks))
                          : 1;
  JitKernel::Fn fn = kernel.function();
  void* const* in = const_cast<void* const*>(inputs);
  // Thread t's share of the blocks, summed into acc (`slots` doubles);
  // scratch outputs live in `scratch` (kBlock doubles each): the kernel
  // writes out[i] for i in [b0, b1), so it gets the buffer less b0 elements.
  auto run_share = [&](int t, double* acc, double* scratch) {
    std::fill(acc, acc + slots, 0.0);
    absl::InlinedVector<void*, 8> outs(outputs, outputs + num_outputs);
    absl::InlinedVector<double*, 8> block_of(num_outputs, nullptr);
    for (size_t o = 0, k = 0; o < num_outputs; ++o) {
      if (outputs[o] == nullptr) block_of[o] = scratch + kBlock * k++;
    }
    const int64_t first = blocks * t / threads, last = blocks * (t + 1) / threads;
    for (int64_t b = first; b < last; ++b) {
      const int64_t b0 = b * kBlock, b1 = std::min(n, b0 + kBlock);
      for (size_t o = 0; o < num_outputs; ++o) {
        if (block_of[o] == nullptr) continue;
        const int64_t size = output_dtypes[o] == at::kFloat ? 4 : 8;
        outs[o] = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(block_of[o]) -
                                          static_cast<uintptr_t>(b0 * size));
      }
      fn(b0, b1, in, outs.data(), scalars);
      for (size_t r = 0; r < reductions.size(); ++r) {
        const LaunchPlan::Reduction& red = reductions[r];
        const double* block = block_of[red.source];
        if (output_dtypes[red.source] == at::kFloat) {
          const float* v = block ? reinterpret_cast<const float*>(block)
                                 : static_cast<const float*>(outputs[red.source]) + b0;
          Accumulate(red, v, b0, b1, acc + offsets[r]);
        } else {
          const double* v = block ? block : static_cast<const double*>(outputs[red.source]) + b0;
          Accumulate(red, v, b0, b1, acc + offsets[r]);
        }
      }
    }
  };
  // One thread (most launches, all small ones): buffers kept per thread, no
  // allocation per call. Several: one set per thread of the team.
  thread_local std::vector<double> serial_acc, serial_scratch;
  std::vector<std::vector<double>> team_acc;
  if (threads == 1) {
    serial_acc.resize(std::max<int64_t>(slots, 1));
    serial_scratch.resize(std::max<int64_t>(num_scratch * kBlock, 1));
    run_share(0, serial_acc.data(), serial_scratch.data());
  } else {
    team_acc.assign(threads, std::vector<double>(std::max<int64_t>(slots, 1)));
#pragma omp parallel num_threads(threads)
    {
      const int t = omp_get_thread_num();
      std::vector<double> scratch(std::max<int64_t>(num_scratch * kBlock, 1));
      run_share(t, team_acc[t].data(), scratch.data());
    }
  }
  std::vector<at::Tensor> results;
  std::vector<double> total;
  for (size_t r = 0; r < reductions.size(); ++r) {
    const LaunchPlan::Reduction& red = reductions[r];
    total.assign(counts[r], 0.0);
    for (int t = 0; t < threads; ++t) {
      const double* part = (threads == 1 ? serial_acc.data() : team_acc[t].data()) + offsets[r];
      if (SumsByPeriod(red)) {
        for (int64_t j = 0; j < counts[r]; ++j) {
          for (int64_t k = 0; k < red.inner; ++k) total[j] += part[j * red.inner + k];
        }
      } else {
        for (int64_t j = 0; j < counts[r]; ++j) total[j] += part[j];
      }
    }
    const c10::ScalarType dtype = output_dtypes[red.source];
    at::Tensor out = at::empty(red.out_sizes, at::TensorOptions().dtype(dtype));
    if (dtype == at::kFloat) {
      float* p = out.data_ptr<float>();
      for (int64_t j = 0; j < counts[r]; ++j) p[j] = static_cast<float>(total[j] * red.scale);
    } else {
      double* p = out.data_ptr<double>();
      for (int64_t j = 0; j < counts[r]; ++j) p[j] = total[j] * red.scale;
    }
    results.push_back(std::move(out));
  }
  return results;
}

}  // namespace metafuse::runtime
