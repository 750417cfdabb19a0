#include "compiler/reduction_op.h"

#include <ATen/ATen.h>
#include <torch/csrc/jit/ir/constants.h>

namespace metafuse::compiler {
namespace {

namespace aten = torch::jit::aten;

enum class Form { kAll, kRows, kColumns };  // sum everything / over rows / over columns

bool Plain(const at::Tensor& t) {
  return t.is_cpu() && t.is_contiguous() &&
         (t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble);
}

// out[j] = sum_i in[i, j] (kRows), out[i] = sum_j in[i, j] (kColumns), or
// out = sum of all, over a row-major [m, n] buffer.
template <typename T>
void Reduce(Form form, const T* in, int64_t m, int64_t n, T* out, double scale) {
  if (form == Form::kAll) {
    T s = 0;
    for (int64_t i = 0; i < m * n; ++i) s += in[i];
    out[0] = scale == 1.0 ? s : static_cast<T>(s / static_cast<T>(1.0 / scale));
  } else if (form == Form::kRows) {
    for (int64_t j = 0; j < n; ++j) out[j] = in[j];
    for (int64_t i = 1; i < m; ++i) {
      const T* row = in + i * n;
      for (int64_t j = 0; j < n; ++j) out[j] += row[j];
    }
  } else {
    for (int64_t i = 0; i < m; ++i) {
      const T* row = in + i * n;
      T s = 0;
      for (int64_t j = 0; j < n; ++j) s += row[j];
      out[i] = s;
    }
  }
}

at::Tensor Run(Form form, const at::Tensor& x, c10::IntArrayRef out_sizes, bool mean) {
  const int64_t m = form == Form::kAll ? 1 : x.size(0);
  const int64_t n = form == Form::kAll ? x.numel() : x.size(1);
  at::Tensor out = at::empty(out_sizes, x.options());
  const double scale = mean ? 1.0 / static_cast<double>(x.numel()) : 1.0;
  if (x.scalar_type() == at::kFloat) {
    Reduce<float>(form, x.data_ptr<float>(), m, n, out.data_ptr<float>(), scale);
  } else {
    Reduce<double>(form, x.data_ptr<double>(), m, n, out.data_ptr<double>(), scale);
  }
  return out;
}

}  // namespace

torch::jit::Operation MakeReductionOperation(torch::jit::Node* node) {
  if (node->kind() != aten::sum && node->kind() != aten::mean &&
      node->kind() != aten::sum_to_size) {
    return nullptr;
  }
  if (node->inputs().empty() || node->outputs().size() != 1) return nullptr;
  auto in_type = node->input(0)->type()->cast<c10::TensorType>();
  auto out_type = node->output()->type()->cast<c10::TensorType>();
  if (!in_type || !out_type || !in_type->isComplete() || !out_type->isComplete()) {
    return nullptr;
  }
  const auto in_sizes = *in_type->sizes().concrete_sizes();
  const auto out_sizes = *out_type->sizes().concrete_sizes();
  Form form;
  bool mean = false;
  if (node->kind() == aten::sum || node->kind() == aten::mean) {
    // Full reduction, no dtype argument: sum(x, None) / mean(x, None).
    if (node->inputs().size() != 2 || !torch::jit::toIValue(node->input(1)) ||
        !torch::jit::toIValue(node->input(1))->isNone()) {
      return nullptr;
    }
    form = Form::kAll;
    mean = node->kind() == aten::mean;
  } else if (node->kind() == aten::sum_to_size && in_sizes.size() == 2) {
    const int64_t m = in_sizes[0], n = in_sizes[1];
    const int64_t out_numel = out_type->numel().value_or(-1);
    if ((out_sizes == std::vector<int64_t>{n} || out_sizes == std::vector<int64_t>{1, n}) &&
        m > 1) {
      form = Form::kRows;
    } else if (out_sizes == std::vector<int64_t>{m, 1} && n > 1) {
      form = Form::kColumns;
    } else if (out_numel == 1) {
      form = Form::kAll;
    } else {
      return nullptr;
    }
  } else {
    return nullptr;
  }
  torch::jit::Operation fallback = node->getOperation();
  const size_t num_inputs = node->inputs().size();
  return [form, mean, out_sizes, fallback, num_inputs](torch::jit::Stack& stack) mutable {
    const at::Tensor& x = stack[stack.size() - num_inputs].toTensor();
    if (!Plain(x)) {
      fallback(stack);
      return;
    }
    at::Tensor out = Run(form, x, out_sizes, mean);
    stack.resize(stack.size() - num_inputs);
    stack.emplace_back(std::move(out));
  };
}

}  // namespace metafuse::compiler
