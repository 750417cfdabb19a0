#include "runtime/compute/scatter_add.h"

#include <algorithm>

#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <torch/library.h>

#include "runtime/compute/buffer_ownership.h"

namespace metafuse::runtime {
namespace {

// `zero_first`: each row is zeroed right before its scatter, while it is in
// the cache, instead of in a pass over the whole tensor beforehand.
template <typename T>
void ScatterRows(T* out, int64_t length, const int64_t* index, const T* src, int64_t count,
                 int64_t rows, bool zero_first) {
  // Rows split over ATen's threads, at least ~32k scattered elements a chunk.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(1, count));
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      T* row = out + r * length;
      if (zero_first) std::fill(row, row + length, T(0));
      const int64_t* at = index + r * count;
      const T* from = src + r * count;
      for (int64_t k = 0; k < count; ++k) {
        const int64_t i = at[k];
        TORCH_CHECK(i >= 0 && i < length, "metafuse scatter_add: index ", i,
                    " is out of bounds for a last dimension of size ", length);
        row[i] += from[k];
      }
    }
  });
}

}  // namespace

bool LastDimScatterAddApplies(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                              const at::Tensor& src) {
  if (!self.defined() || !index.defined() || !src.defined() || self.dim() < 1 ||
      !self.is_cpu() || !index.is_cpu() || !src.is_cpu() ||
      (self.scalar_type() != at::kFloat && self.scalar_type() != at::kDouble) ||
      src.scalar_type() != self.scalar_type() || index.scalar_type() != at::kLong ||
      !self.is_contiguous() || !index.is_contiguous() || !src.is_contiguous()) {
    return false;
  }
  if (dim != -1 && dim != self.dim() - 1) return false;
  // Programs run without autograd; a call that records a graph keeps ATen's.
  if (at::GradMode::is_enabled() && (self.requires_grad() || src.requires_grad())) return false;
  // One index per source element, rows matching self's.
  if (index.sizes() != src.sizes() || index.dim() != self.dim()) return false;
  for (int64_t d = 0; d + 1 < self.dim(); ++d) {
    if (index.size(d) != self.size(d)) return false;
  }
  return true;
}

namespace {

// `out` (contiguous, index's rows) gets src scattered along its last dim.
void ScatterInto(at::Tensor& out, const at::Tensor& index, const at::Tensor& src,
                 bool zero_first) {
  const int64_t length = out.size(-1), count = index.size(-1);
  const int64_t rows = count == 0 ? 0 : index.numel() / count;
  if (rows == 0) {
    if (zero_first) out.zero_();
    return;
  }
  if (out.scalar_type() == at::kFloat) {
    ScatterRows<float>(out.data_ptr<float>(), length, index.data_ptr<int64_t>(),
                       src.data_ptr<float>(), count, rows, zero_first);
  } else {
    ScatterRows<double>(out.data_ptr<double>(), length, index.data_ptr<int64_t>(),
                        src.data_ptr<double>(), count, rows, zero_first);
  }
}

}  // namespace

at::Tensor ScatterAddLastDim(at::Tensor self, const at::Tensor& index, const at::Tensor& src,
                             bool in_place) {
  at::Tensor out = in_place ? std::move(self) : self.clone(at::MemoryFormat::Contiguous);
  ScatterInto(out, index, src, /*zero_first=*/false);
  return out;
}

at::Tensor ScatterAddIntoZeros(at::IntArrayRef size, at::ScalarType dtype, at::Device device,
                               int64_t dim, const at::Tensor& index, const at::Tensor& src) {
  // LastDimScatterAddApplies reads only the result's metadata, not its data.
  at::Tensor out = at::empty(size, at::TensorOptions().dtype(dtype).device(device));
  if (LastDimScatterAddApplies(out, dim, index, src)) {
    ScatterInto(out, index, src, /*zero_first=*/true);
    return out;
  }
  return out.zero_().scatter_add_(dim, index, src);
}

TORCH_LIBRARY_FRAGMENT(metafuse, m) {
  // Compiled programs only (compiler/fusion/scatter_into_zeros.h); not
  // differentiable: programs are differentiated before it appears.
  m.def("scatter_add_into_zeros(int[] size, ScalarType dtype, Device device, int dim, "
        "Tensor index, Tensor src) -> Tensor");
}

TORCH_LIBRARY_IMPL(metafuse, CompositeExplicitAutograd, m) {
  m.impl("scatter_add_into_zeros",
         [](c10::IntArrayRef size, c10::ScalarType dtype, c10::Device device, int64_t dim,
            const at::Tensor& index, const at::Tensor& src) {
           return ScatterAddIntoZeros(size, dtype, device, dim, index, src);
         });
}

torch::jit::Operation MakeScatterAddOperation(torch::jit::Operation aten) {
  return [aten](torch::jit::Stack& stack) mutable {
    auto args = torch::jit::last(stack, 4);
    if (!args[1].isInt() ||
        !LastDimScatterAddApplies(args[0].toTensor(), args[1].toInt(), args[2].toTensor(),
                                  args[3].toTensor())) {
      aten(stack);
      return;
    }
    const at::Tensor src = std::move(stack.back()).toTensor();
    stack.pop_back();
    const at::Tensor index = std::move(stack.back()).toTensor();
    stack.pop_back();
    stack.pop_back();  // dim
    at::Tensor self = std::move(stack.back()).toTensor();
    stack.pop_back();
    // The fresh zeros of a pooling gradient are held by nothing else here.
    const bool in_place = BufferIsFree(self);
    stack.emplace_back(ScatterAddLastDim(std::move(self), index, src, in_place));
  };
}

}  // namespace metafuse::runtime
