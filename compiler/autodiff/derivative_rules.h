// Derivative rules, by family, and what they share: the emitter that
// inserts primitive ops and small helpers. Each rule maps a node and the
// cotangents of its outputs to one cotangent per input, written in the same
// primitive op set it differentiates, so the backward of a backward is
// derived the same way. The engine (autodiff.cc) looks rules up by op name;
// the op table (op_table.h) says which primitives must have one.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>

#include "compiler/autodiff/autodiff.h"
#include "compiler/ir/ir_helpers.h"
#include "compiler/ir/primitives.h"

namespace metafuse::compiler::rules {

using torch::jit::Graph;
using torch::jit::NamedValue;
using torch::jit::Node;
using torch::jit::Symbol;
using torch::jit::Value;

// Small emitter: every helper inserts primitive ops at the current point.
struct Emit {
  Graph& g;
  Value* op(const char* name, std::vector<NamedValue> args) {
    return g.insert(Symbol::fromQualString(name), args);
  }
  Value* c(double v) { return g.insertConstant(v); }
  Value* ci(int64_t v) { return g.insertConstant(v); }
  Value* size(Value* x) { return op("aten::size", {x}); }
  Value* numel(Value* x) { return op("aten::numel", {x}); }
  Value* mul(Value* a, Value* b) { return op("aten::mul", {a, b}); }
  Value* div(Value* a, Value* b) { return op("aten::div", {a, b}); }
  Value* add(Value* a, Value* b) { return op("aten::add", {a, b}); }
  Value* sub(Value* a, Value* b) { return op("aten::sub", {a, b}); }
  Value* neg(Value* a) { return op("aten::neg", {a}); }
  // Undo broadcasting: reduce `grad` to the shape of `like`.
  Value* sum_to(Value* grad, Value* like) {
    return op("aten::sum_to_size", {grad, size(like)});
  }
  Value* expand_as(Value* grad, Value* like) {
    return op("aten::expand", {grad, size(like)});
  }
  Value* as_mask(Value* cond, Value* like) {
    return op("aten::type_as", {cond, like});
  }
  Value* zeros_like(Value* x) { return op("aten::zeros_like", {x}); }
  Value* int_list(const std::vector<Value*>& items) {
    return g.insertNode(g.createList(c10::IntType::get(), items))->output();
  }
  Value* dim_size(Value* x, int64_t dim) {
    return op("aten::size", {x, ci(dim)});
  }
};

inline double ConstDouble(Value* v) {
  auto iv = torch::jit::toIValue(v);
  TORCH_CHECK(iv.has_value(), "metafuse compiler: expected a constant");
  return iv->toScalar().toDouble();
}

inline int64_t Rank(Value* v) {
  auto type = v->type()->cast<c10::TensorType>();
  auto dim = type ? type->dim() : c10::nullopt;
  if (!dim)
    throw UnsupportedOp(std::string("rank-unknown input of ") +
                        OpName(v->node()));
  return static_cast<int64_t>(*dim);
}

// A constant int list argument (a prim::Constant or a ListConstruct of
// constants), widened to `width` entries when given as one int.
inline std::vector<int64_t> ConstIntList(Value* v, const std::string& what,
                                         size_t width = 0) {
  std::optional<std::vector<int64_t>> list = ConstantIntList(v);
  if (!list) throw UnsupportedOp(what + " (expected a constant int list)");
  std::vector<int64_t> out = *std::move(list);
  if (width > 0 && out.size() == 1) out.assign(width, out[0]);
  if (width > 0 && out.size() != width)
    throw UnsupportedOp(what + " (wrong list length)");
  return out;
}

// Re-inserts reduced dims of a keepdim=False reduction so `grad` broadcasts
// against the input again.
inline Value* Unreduce(Emit& e, Value* grad, Value* input, Value* dims_value,
                bool keepdim) {
  if (keepdim) return grad;
  // Lists stay ListConstructs of constants (constant propagation folds
  // immutable values only).
  std::vector<int64_t> dims = ConstIntList(dims_value, "reduction dims");
  // The rank is only needed for negative dims (values made by rules carry
  // no static rank).
  if (std::any_of(dims.begin(), dims.end(), [](int64_t d) { return d < 0; })) {
    const int64_t rank = Rank(input);
    for (auto& d : dims) d = d < 0 ? d + rank : d;
  }
  std::sort(dims.begin(), dims.end());
  for (int64_t d : dims) grad = e.op("aten::unsqueeze", {grad, e.ci(d)});
  return grad;
}

inline int64_t ConstInt(Value* v, const std::string& what) {
  auto iv = torch::jit::toIValue(v);
  if (!iv || !iv->isInt())
    throw UnsupportedOp(what + " (expected a constant int)");
  return iv->toInt();
}

inline void ExpectBatched(Value* v, const char* op) {
  auto type = v->type()->cast<c10::TensorType>();
  auto dim = type ? type->dim() : c10::nullopt;
  if (dim && *dim != 4) {
    throw UnsupportedOp(std::string(op) + " with a rank-" +
                        std::to_string(*dim) +
                        " input (batched NCHW expected)");
  }
}

struct ConvParams {
  std::vector<int64_t> stride, padding, dilation;
  int64_t groups = 1;
};

// Crops the trailing rows/cols of NCHW `r` to the spatial size of `like`:
// constant_pad_nd with pads (0, W_like - W_r, 0, H_like - H_r) <= 0.
inline Value* CropSpatial(Emit& e, Value* r, Value* like) {
  Value* crop = e.int_list(
      {e.ci(0), e.op("aten::sub", {e.dim_size(like, 3), e.dim_size(r, 3)}),
       e.ci(0), e.op("aten::sub", {e.dim_size(like, 2), e.dim_size(r, 2)})});
  return e.op("aten::constant_pad_nd", {r, crop, e.c(0.0)});
}

// Gradient of conv2d(x, w) w.r.t. x for cotangent gy: the transposed
// convolution with the same parameters; output_padding (computed from the
// sizes at run time) restores the rows/cols the strided forward skipped.
inline Value* ConvInputGrad(Emit& e, Value* gy, Value* w, Value* x,
                     const ConvParams& c) {
  std::vector<Value*> output_padding;
  for (int64_t i = 0; i < 2; ++i) {
    if (c.stride[i] == 1) {
      output_padding.push_back(e.ci(0));
      continue;
    }
    // (H + 2p - d (k - 1) - 1) mod s
    Value* span =
        e.op("aten::sub",
             {e.op("aten::add", {e.dim_size(x, 2 + i),
                                 e.ci(2 * c.padding[i] + c.dilation[i] - 1)}),
              e.op("aten::mul", {e.dim_size(w, 2 + i), e.ci(c.dilation[i])})});
    output_padding.push_back(
        e.op("aten::remainder", {span, e.ci(c.stride[i])}));
  }
  return e.op(
      "aten::conv_transpose2d",
      {gy, w, e.g.insertConstant(c10::IValue()), e.g.insertConstant(c.stride),
       e.g.insertConstant(c.padding), e.int_list(output_padding),
       e.ci(c.groups), e.g.insertConstant(c.dilation)});
}

// Gradient of conv2d(x, w) w.r.t. w (shape O x C/g x kH x kW) for cotangent
// gy: a convolution over the batch, with batch and channel dims exchanged:
//   dw[o, c, a, b] = sum_{n,i,j} gy[n, o, i, j] x[n, c, i s + a d - p, ...]
// i.e. conv2d(x^T, gy^T) with stride d, dilation s, padding p (grouped
// channels go next to the batch so groups stay groups), transposed back and
// cropped to (kH, kW) where the strided forward left trailing rows unused.
inline Value* ConvWeightGrad(Emit& e, Value* x, Value* gy, Value* w,
                      const ConvParams& c) {
  Value* xt;
  if (c.groups == 1) {
    xt = e.op("aten::transpose", {x, e.ci(0), e.ci(1)});
  } else {
    // [N, g*Cg, H, W] -> [Cg, g*N, H, W] with channel k*N + n = x[n, k*Cg + c].
    Value* n = e.dim_size(x, 0);
    Value* split = e.op("aten::reshape",
                        {x, e.int_list({n, e.ci(c.groups), e.ci(-1),
                                        e.dim_size(x, 2), e.dim_size(x, 3)})});
    Value* moved =
        e.op("aten::permute",
             {split, e.g.insertConstant(std::vector<int64_t>{2, 1, 0, 3, 4})});
    xt = e.op(
        "aten::reshape",
        {moved, e.int_list({e.ci(-1), e.op("aten::mul", {n, e.ci(c.groups)}),
                            e.dim_size(x, 2), e.dim_size(x, 3)})});
  }
  Value* gyt = e.op("aten::transpose", {gy, e.ci(0), e.ci(1)});
  Value* r =
      e.op("aten::conv2d",
           {xt, gyt, e.g.insertConstant(c10::IValue()),
            e.g.insertConstant(c.dilation), e.g.insertConstant(c.padding),
            e.g.insertConstant(c.stride), e.ci(c.groups)});
  r = e.op("aten::transpose", {r, e.ci(0), e.ci(1)});
  if (c.stride[0] == 1 && c.stride[1] == 1) return r;
  return CropSpatial(e, r, w);
}

inline Value* BiasGrad(Emit& e, Value* g) {
  return e.op("aten::sum",
              {g, e.g.insertConstant(std::vector<int64_t>{0, 2, 3}),
               e.g.insertConstant(false)});
}

// Negates an int list (constant or ListConstruct of ints).
inline Value* NegatedIntList(Emit& e, Value* list) {
  if (auto iv = torch::jit::toIValue(list)) {
    std::vector<int64_t> v = iv->toIntVector();
    for (auto& x : v) x = -x;
    return e.g.insertConstant(v);
  }
  if (list->node()->kind() != torch::jit::prim::ListConstruct) {
    throw UnsupportedOp(
        "aten::constant_pad_nd with a pad list that is neither constant nor "
        "built");
  }
  std::vector<Value*> items;
  for (Value* in : list->node()->inputs())
    items.push_back(e.op("aten::neg", {in}));
  return e.int_list(items);
}

using Grads = std::vector<Value*>;  // one per node input, nullptr = none
using Rule = std::function<Grads(Emit&, Node*, const Grads& grad_outputs)>;

inline Value* Alpha(Node* n, size_t index) {
  return n->inputs().size() > index ? n->input(index) : nullptr;
}

inline Value* TimesAlpha(Emit& e, Value* grad, Value* alpha) {
  if (alpha == nullptr) return grad;
  auto iv = torch::jit::toIValue(alpha);
  if (iv && iv->toScalar().toDouble() == 1.0) return grad;
  return e.mul(grad, alpha);
}

using RuleTable = std::unordered_map<std::string, Rule>;

// One registration function per family (rules_<family>.cc).
void AddElementwiseRules(RuleTable& table);
void AddReductionRules(RuleTable& table);
void AddShapeRules(RuleTable& table);
void AddLinalgConvPoolRules(RuleTable& table);
void AddOptimizerRules(RuleTable& table);

// The rule for `op` (every family's), or nullptr.
const Rule* FindRule(const std::string& op);

}  // namespace metafuse::compiler::rules
