// The op table: every primitive of the compiler, listed once.
//
// Each entry says which family the op belongs to, whether its outputs carry
// a gradient (then autodiff must have a rule for it: derivative_rules.h;
// a test checks both directions), and how the elementwise fuser lowers it
// (lower_fusion_group.cc), if it does. The primitive check (primitives.h),
// the autodiff engine's "no gradient" test and the fuser's form lookup are
// all derived from this table; decomposition (decompose/) rewrites traced
// ops into these.
#pragma once

#include <string>
#include <vector>

#include <torch/csrc/jit/ir/ir.h>

namespace metafuse::compiler {

enum class OpFamily {
  kStructural,   // constants, lists, tuples
  kElementwise,
  kReduction,
  kShape,
  kScalar,       // sizes as values
  kLinalg,       // matrix products
  kConvPool,     // convolution, pooling
  kIndexing,
  kOptimizer,    // fused optimizer updates
};

// How the fuser turns an elementwise op into scalar kernel-IR ops.
enum class FuserForm {
  kNone,          // not fused
  kUnary,         // f(x)
  kBinary,        // f(x, y)
  kBinaryAlpha,   // add / sub / rsub with alpha
  kPowScalar,     // pow(x, constant)
  kCompare,       // a bool condition for where / type_as
  kWhere,
  kTypeAs,        // a cast
  kExpand,        // the identity (broadcasting composes)
  kLike,          // zeros_like / ones_like
};

struct PrimitiveOp {
  const char* name;      // qualified, e.g. "aten::add"
  OpFamily family;
  bool differentiable;   // false: its outputs carry no gradient
  FuserForm fuser_form;
};

// Every primitive, in family order.
const std::vector<PrimitiveOp>& PrimitiveOps();

// The entry of the op `node` runs, or nullptr when it is not in the table.
const PrimitiveOp* FindPrimitiveOp(const torch::jit::Node* node);
const PrimitiveOp* FindPrimitiveOp(const std::string& name);

}  // namespace metafuse::compiler
