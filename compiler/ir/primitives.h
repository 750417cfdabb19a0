// The primitive op set of metafuse's compiler.
//
// Every graph the compiler differentiates or runs is written in these ops
// (after decomposition), and every derivative rule (rules_*.cc) is written
// in them too, so a derivative can itself be differentiated: the set is
// closed under differentiation. docs/compiler.md lists it.
//
//   elementwise   add sub rsub mul div neg exp log tanh sigmoid relu sqrt
//                 pow(Tensor, Scalar) sin cos abs erf log1p expm1 where gt lt
//                 ge le eq
//                 type_as zeros_like ones_like clone contiguous detach (no
//                 gradient: it stops the derivative), floor ceil round trunc
//                 (no gradient, as eager's zero)
//   reductions    sum sum.dim_IntList mean mean.dim logsumexp amax
//   shape         reshape expand sum_to_size t transpose unsqueeze
//                 squeeze.dim size numel flatten permute
//                 constant_pad_nd (negative pads crop; its own adjoint)
//   linear algebra mm
//   convolution   conv2d (int-list padding, batched NCHW)
//                   d input  = conv_transpose2d(g, W) with the same stride,
//                              padding, dilation, groups and an
//                              output_padding computed from the sizes
//                   d weight = conv2d of the (batch, channel)-transposed
//                              input and gradient, stride and dilation
//                              swapped, cropped by constant_pad_nd
//                   d bias   = sum over (0, 2, 3)
//                 conv_transpose2d.input
//                   d input  = conv2d(g, W), same parameters
//                   d weight = the conv2d weight rule with the roles of
//                              input and gradient exchanged
//                   d bias   = sum over (0, 2, 3)
//   pooling       max_pool2d_with_indices (values, indices)
//                   d input  = scatter_add of the gradient at the argmax
//                              indices over the flattened spatial dims
//                              (its derivative is the matching gather)
//   indexing      gather scatter_add (d src: gather, zero-padded to src's
//                 shape when index is smaller); argmax argmin (no gradient)
//   scalars       integer arithmetic on sizes (size, Int, NumToTensor,
//                 add/sub/mul/remainder/floordiv/neg on ints): no gradient
//   optimizers    metafuse::adam (closed-form derivative rule)
//
// decompose.h lists the traced ops that are rewritten into these (linear,
// matmul, _convolution, max_pool2d, batch_norm, softplus, ...).
#pragma once

#include <string>

#include <torch/csrc/jit/ir/ir.h>

namespace metafuse::compiler {

// True for nodes the compiler can differentiate and run as they are
// (primitive ops, constants, list construction, integer arithmetic).
bool IsPrimitive(const torch::jit::Node* node);

// "aten::linear" style name of a node's operator.
std::string OpName(const torch::jit::Node* node);

// True when a value is a tensor or a list of tensors (what can carry a
// gradient).
bool CarriesTensor(const torch::jit::Value* value);

}  // namespace metafuse::compiler
