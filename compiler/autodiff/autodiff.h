// Pass: symbolic reverse-mode differentiation on TorchScript IR.
//
// AppendVjp appends to a graph the nodes that compute, for cotangents
// `seeds` of `outputs`, the vector-Jacobian product with respect to `wrt`.
// Every rule is written in the primitive set (primitives.h), so the appended
// nodes can be differentiated again by another AppendVjp: the inner
// gradients of an unrolled loop, and the meta-gradient through them
// (Hessian-vector products included), come out of the same rules.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include <torch/csrc/jit/ir/ir.h>

namespace metafuse::compiler {

// Thrown when a node on a differentiated path has no derivative rule; the
// message names the op (the caller falls back to eager execution).
class UnsupportedOp : public std::runtime_error {
 public:
  explicit UnsupportedOp(const std::string& op)
      : std::runtime_error(op), op_(op) {}
  const std::string& op() const { return op_; }

 private:
  std::string op_;
};

// Returns one gradient value per entry of `wrt` (zeros where an output does
// not depend on it). Nodes are appended before the graph's return.
std::vector<torch::jit::Value*> AppendVjp(
    torch::jit::Graph& graph, const std::vector<torch::jit::Value*>& outputs,
    const std::vector<torch::jit::Value*>& seeds,
    const std::vector<torch::jit::Value*>& wrt);

}  // namespace metafuse::compiler
