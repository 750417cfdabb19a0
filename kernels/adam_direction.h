// Adam's direction in one pass over each tensor, rounded as optim's
// scale_by_adam chain of ATen ops rounds it:
//
//   mu  <- mu * b1 + (1 - b1) * g             (mul_, add_ with alpha)
//   nu  <- nu * b2 + (1 - b2) * g * g         (mul_, addcmul_)
//   out  = (mu / bc1) / (sqrt(nu / bc2 + eps_root) + eps)
//
// Every scalar is cast to the tensors' dtype first, and add-with-alpha and
// addcmul are one fused multiply-add each, as in an ATen built with FMA
// contraction (Debian's 1.13 is). One loop replaces ten dispatched ops per
// tensor, which for a small net's outer step cost more than the arithmetic.
// Whether this process's ATen rounds the same way is the caller's check:
// optim's ScaleByAdam compares the two once per dtype and keeps the ATen
// chain where they differ.
#pragma once

#include <ATen/ATen.h>

namespace metafuse {

struct AdamDirectionScalars {
  double b1, b2;    // the moments' decay rates
  double bc1, bc2;  // the bias corrections 1 - b^t of this step
  double eps, eps_root;
};

// Whether the loop takes these tensors: plain CPU tensors (no functorch or
// Python wrapper), all float32 or all float64,
// contiguous, one element count, mu and nu apart from each other and from g.
bool AdamDirectionApplies(const at::Tensor& mu, const at::Tensor& nu,
                          const at::Tensor& g);

// Updates mu and nu in place and returns the direction (a new tensor shaped
// like g). Requires AdamDirectionApplies(mu, nu, g).
at::Tensor AdamDirectionInPlace(at::Tensor& mu, at::Tensor& nu,
                                const at::Tensor& g,
                                const AdamDirectionScalars& s);

}  // namespace metafuse
