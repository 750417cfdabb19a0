// The primitive op set of metafuse's compiler.
//
// Every graph the compiler differentiates or runs is written in these ops
// (after decomposition), and every derivative rule in autodiff.cc is written
// in them too, so a derivative can itself be differentiated: the set is
// closed under differentiation. docs/compiler.md lists it.
//
//   elementwise   add sub rsub mul div neg exp log tanh sigmoid relu sqrt
//                 pow(Tensor, Scalar) sin cos abs where gt lt ge le eq
//                 type_as zeros_like ones_like clone contiguous
//   reductions    sum sum.dim_IntList mean mean.dim logsumexp amax
//   shape         reshape view expand sum_to_size t transpose unsqueeze
//                 squeeze.dim size numel
//   linear algebra mm
//   indexing      gather scatter_add
//   optimizers    metafuse::adam (closed-form derivative rule)
#pragma once

#include <string>

#include <torch/csrc/jit/ir/ir.h>

namespace metafuse::compiler {

// True for nodes the compiler can differentiate and run as they are
// (primitive ops, constants, list construction).
bool IsPrimitive(const torch::jit::Node* node);

// "aten::linear" style name of a node's operator.
std::string OpName(const torch::jit::Node* node);

}  // namespace metafuse::compiler
