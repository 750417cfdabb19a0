// Pass: optimizer-backward symbolic elimination.
//
// An unfused metafuse.adam / metafuse.adamw update traced inside
// metafuse.compile is a generic chain of primitives (after
// the prepare stage's lowering of addcmul and full_like):
//
//   [g' = g * -1]                          (maximize)
//   [g' = add(g', p, alpha=wd)]            (coupled weight decay: adam)
//   mu' = add(mul(mu, b1), g', alpha=1-b1)
//   nu' = add(mul(nu, b2), mul(mul(g', g'), 1-b2), alpha=1)
//   s   = sqrt(add(div(nu', bc2), eps_root, alpha=1))   (add absent: eps_root 0)
//   u   = div(div(mu', bc1), add(s, eps, alpha=1))
//   [u  = add(u, p, alpha=wd)]             (decoupled weight decay: adamw)
//   update = mul(u, -lr)
//
// Differentiated generically (the meta-backward), every one of these nodes
// gets its own rule: quotient rules, the sqrt rule, broadcasting undone by
// sum_to_size. EliminateOptimizerBackward replaces each such chain by one
// metafuse::adam node (outputs update, mu', nu'), whose derivative rule in
// rules_optimizer.cc is the reduced closed form of the whole update (it reads the
// forward's mu' and nu'; eps and eps_root are exact). It runs on the
// primitive-set graph before differentiation, so both the gradient markers
// and the meta-backward see the node.
//
// A chain is rewritten only when nothing can change: every hyperparameter is
// a constant (b1 in [0, 1), b2 in (0, 1), eps, eps_root >= 0, the bias
// corrections equal 1 - b^t for one integer step count t, the EMA weights
// equal 1 - b exactly), the chain's intermediate values (everything but mu',
// nu' and the update) have no users outside the chain, and the grad, the
// moments, the parameter and the results are float/double tensors of one
// known shape on one device the node has a kernel for (the CPU; CUDA where
// the kernels' CUDA form is registered), since the node's kernel takes no
// broadcasting. Anything else
// (AMSGrad's running maximum, a tensor learning rate, a reused intermediate)
// is left as it is. Values agree with the chain to rounding (the node
// evaluates the same formula in a different association order).
//
// SGD (with or without momentum) is not rewritten: its chain is one or two
// multiply-adds whose generic derivative is already its closed form.
#pragma once

#include <cstdint>
#include <memory>

#include <torch/csrc/jit/ir/ir.h>

#include "compiler/ir/ir_dump.h"

namespace metafuse::compiler {

struct OptimizerEliminationStats {
  int64_t adam = 0;   // chains without decoupled weight decay
  int64_t adamw = 0;  // chains with decoupled weight decay
  int64_t total() const { return adam + adamw; }
};

// Rewrites `graph` in place; returns how many chains it replaced.
OptimizerEliminationStats EliminateOptimizerBackward(
    const std::shared_ptr<torch::jit::Graph>& graph);

// The pipeline's entry (compiler/pipeline.cc, prepare): skipped
// when METAFUSE_DISABLE_OPTIMIZER_ELIMINATION is set to anything but "" or
// "0"; records the stage "optimizer backward eliminated" in `log` (when not
// null) only when a chain was replaced.
OptimizerEliminationStats EliminateOptimizerBackwardStage(
    const std::shared_ptr<torch::jit::Graph>& graph, StageLog* log);

}  // namespace metafuse::compiler
