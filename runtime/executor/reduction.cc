#include "runtime/executor/reduction.h"

// The column sums (dst[j] += row[j]) vectorize only past -O2's "very cheap"
// cost model, which refuses loops of run-time length; the order of every
// addition is unchanged (no reassociation), so the bits are the same.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3", "vect-cost-model=dynamic")
#endif

#include <array>

#include <ATen/ATen.h>
#include <c10/util/accumulate.h>

#include "runtime/executor/operator_lookup.h"

namespace metafuse::runtime {
namespace {

using Form = ReductionPlan::Form;

bool Plain(const at::Tensor& t) {
  return t.is_cpu() && t.is_contiguous() &&
         (t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble);
}

// out[o, j] = sum_r in[o, r, j] over a row-major [outer, reduce, inner]
// buffer, in order of r; divided by `reduce` for a mean.
template <typename T>
void ReduceBlock(const T* __restrict__ in, int64_t outer, int64_t reduce, int64_t inner,
                 T* __restrict__ out, bool mean) {
  for (int64_t o = 0; o < outer; ++o) {
    const T* block = in + o * reduce * inner;
    T* dst = out + o * inner;
    if (inner == 1) {
      T s = 0;
      for (int64_t r = 0; r < reduce; ++r) s += block[r];
      dst[0] = s;
    } else if (reduce == 0) {  // an empty axis: no row to start from
      for (int64_t j = 0; j < inner; ++j) dst[j] = 0;
    } else {
      for (int64_t j = 0; j < inner; ++j) dst[j] = block[j];
      for (int64_t r = 1; r < reduce; ++r) {
        const T* row = block + r * inner;
        for (int64_t j = 0; j < inner; ++j) dst[j] += row[j];
      }
    }
    if (mean) {
      for (int64_t j = 0; j < inner; ++j) dst[j] /= static_cast<T>(reduce);
    }
  }
}

// Whether the loop's output for x has the plan's out_sizes: a generic
// program may meet other shapes than the plan's (ATen then), and the loop
// writes as many sums as x's shape makes.
bool Fits(Form form, const at::Tensor& x, int64_t out_numel, const std::vector<int64_t>& block) {
  switch (form) {
    case ReductionPlan::kAll: return out_numel == 1;
    case ReductionPlan::kRows: return x.dim() == 2 && out_numel == x.size(1);
    case ReductionPlan::kColumns: return x.dim() == 2 && out_numel == x.size(0);
    case ReductionPlan::kBlock:
      return block.size() == 3 && x.numel() == block[0] * block[1] * block[2] &&
             out_numel == block[0] * block[2];
  }
  return false;
}

// Every form is a block reduction of the contiguous input: kAll
// [1, numel, 1], kRows (a [m, n] matrix over its rows) [1, m, n], kColumns
// [m, n, 1], kBlock the plan's.
at::Tensor Run(Form form, const at::Tensor& x, c10::IntArrayRef out_sizes, bool mean,
               const std::vector<int64_t>& block) {
  std::array<int64_t, 3> b{};
  switch (form) {
    case ReductionPlan::kAll: b = {1, x.numel(), 1}; break;
    case ReductionPlan::kRows: b = {1, x.size(0), x.size(1)}; break;
    case ReductionPlan::kColumns: b = {x.size(0), x.size(1), 1}; break;
    case ReductionPlan::kBlock: b = {block[0], block[1], block[2]}; break;
  }
  at::Tensor out = at::empty(out_sizes, x.options());
  if (x.scalar_type() == at::kFloat) {
    ReduceBlock<float>(x.data_ptr<float>(), b[0], b[1], b[2], out.data_ptr<float>(), mean);
  } else {
    ReduceBlock<double>(x.data_ptr<double>(), b[0], b[1], b[2], out.data_ptr<double>(), mean);
  }
  return out;
}

}  // namespace

torch::jit::Operation MakeReductionOperation(const ReductionPlan& plan, size_t num_inputs) {
  const Form form = plan.form;
  const bool mean = plan.mean;
  const std::vector<int64_t> out_sizes = plan.out_sizes;
  const std::vector<int64_t> block = plan.block;
  const int64_t out_numel = c10::multiply_integers(out_sizes);
  torch::jit::Operation fallback = LookUpOperation(plan.fallback_schema);
  return [form, mean, out_sizes, block, out_numel, fallback,
          num_inputs](torch::jit::Stack& stack) mutable {
    const at::Tensor& x = stack[stack.size() - num_inputs].toTensor();
    if (!Plain(x) || !Fits(form, x, out_numel, block)) {
      fallback(stack);
      return;
    }
    at::Tensor out = Run(form, x, out_sizes, mean, block);
    stack.resize(stack.size() - num_inputs);
    stack.emplace_back(std::move(out));
  };
}

}  // namespace metafuse::runtime
