// The arithmetic optimizers need over matching trees of tensors, done on the
// flat leaf lists (the tree side checks the structures and unflattens). Plain
// ATen calls, one per leaf, so autograd sees every step (meta-gradients flow).
#pragma once

#include <vector>

#include <ATen/ATen.h>

namespace metafuse::tree {

// a[i] + alpha * b[i]
std::vector<at::Tensor> AddLeaves(const std::vector<at::Tensor>& a,
                                  const std::vector<at::Tensor>& b,
                                  const at::Scalar& alpha = 1);
// a[i] - alpha * b[i]
std::vector<at::Tensor> SubLeaves(const std::vector<at::Tensor>& a,
                                  const std::vector<at::Tensor>& b,
                                  const at::Scalar& alpha = 1);
// scalar * a[i]
std::vector<at::Tensor> ScalarMulLeaves(const at::Scalar& scalar,
                                        const std::vector<at::Tensor>& a);
// sum_i <a[i], b[i]> (real inner product) as a 0-dim tensor.
at::Tensor VdotLeaves(const std::vector<at::Tensor>& a,
                      const std::vector<at::Tensor>& b);

}  // namespace metafuse::tree
