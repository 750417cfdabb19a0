// Pass: rewrite traced ops into the primitive set (primitives.h).
//
//   linear(x, W, b)        -> mm(x, t(W)) + b           (2-D x)
//   matmul(a, b)           -> mm(a, b)                  (2-D operands)
//   addmm(c, a, b)         -> mm(a, b) + c              (alpha = beta = 1)
//   mse_loss(a, b, r)      -> mean / sum / none of (a - b)^2
//   square(x)              -> x * x
//   log_softmax(x, d)      -> x - logsumexp(x, [d], keepdim)
//   softmax(x, d)          -> exp(log_softmax(x, d))
//   cross_entropy(x, t)    -> mean(-gather(log_softmax(x, 1), 1, t[:, None]))
//   nll_loss(x, t)         -> mean(-gather(x, 1, t[:, None]))
//   dropout(x, p, False)   -> x
// Returns the names of the ops it could neither keep nor rewrite (empty when
// the whole graph is in the primitive set).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/jit/ir/ir.h>

namespace metafuse::compiler {

std::vector<std::string> DecomposeToPrimitives(
    const std::shared_ptr<torch::jit::Graph>& graph);

}  // namespace metafuse::compiler
