#include "tree/tensor_ops.h"

namespace metafuse::tree {

std::vector<at::Tensor> AddLeaves(const std::vector<at::Tensor>& a,
                                  const std::vector<at::Tensor>& b,
                                  const at::Scalar& alpha) {
  TORCH_CHECK(a.size() == b.size(), "tree add: ", a.size(), " vs ", b.size(),
              " leaves; the trees must have the same structure");
  std::vector<at::Tensor> out;
  out.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i) out.push_back(at::add(a[i], b[i], alpha));
  return out;
}

std::vector<at::Tensor> SubLeaves(const std::vector<at::Tensor>& a,
                                  const std::vector<at::Tensor>& b,
                                  const at::Scalar& alpha) {
  TORCH_CHECK(a.size() == b.size(), "tree sub: ", a.size(), " vs ", b.size(),
              " leaves; the trees must have the same structure");
  std::vector<at::Tensor> out;
  out.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i) out.push_back(at::sub(a[i], b[i], alpha));
  return out;
}

std::vector<at::Tensor> ScalarMulLeaves(const at::Scalar& scalar,
                                        const std::vector<at::Tensor>& a) {
  std::vector<at::Tensor> out;
  out.reserve(a.size());
  for (const at::Tensor& t : a) out.push_back(at::mul(t, scalar));
  return out;
}

at::Tensor VdotLeaves(const std::vector<at::Tensor>& a,
                      const std::vector<at::Tensor>& b) {
  TORCH_CHECK(a.size() == b.size(), "tree vdot: ", a.size(), " vs ", b.size(),
              " leaves; the trees must have the same structure");
  if (a.empty()) return at::zeros({});
  at::Tensor total;
  for (size_t i = 0; i < a.size(); ++i) {
    at::Tensor term = at::sum(at::mul(a[i], b[i]));
    total = i == 0 ? term : at::add(total, term);
  }
  return total;
}

}  // namespace metafuse::tree
