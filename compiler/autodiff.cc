#include "compiler/autodiff.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <unordered_map>
#include <unordered_set>

#include <torch/csrc/jit/ir/constants.h>

#include "compiler/primitives.h"

namespace metafuse::compiler {
namespace {

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

bool IsTensor(const Value* v) {
  return v->type()->kind() == c10::TypeKind::TensorType;
}

double ConstDouble(Value* v) {
  auto iv = torch::jit::toIValue(v);
  TORCH_CHECK(iv.has_value(), "metafuse compiler: expected a constant");
  return iv->toScalar().toDouble();
}

int64_t Rank(Value* v) {
  auto type = v->type()->cast<c10::TensorType>();
  auto dim = type ? type->dim() : c10::nullopt;
  if (!dim)
    throw UnsupportedOp(std::string("rank-unknown input of ") +
                        OpName(v->node()));
  return static_cast<int64_t>(*dim);
}

// A constant int list argument (a prim::Constant or a ListConstruct of
// constants), widened to `width` entries when given as one int.
std::vector<int64_t> ConstIntList(Value* v, const std::string& what,
                                  size_t width = 0) {
  std::vector<int64_t> out;
  if (auto iv = torch::jit::toIValue(v)) {
    if (iv->isIntList())
      out = iv->toIntVector();
    else if (iv->isInt())
      out = {iv->toInt()};
    else
      throw UnsupportedOp(what + " (expected an int list)");
  } else if (v->node()->kind() == torch::jit::prim::ListConstruct) {
    for (Value* in : v->node()->inputs()) {
      auto item = torch::jit::toIValue(in);
      if (!item || !item->isInt())
        throw UnsupportedOp(what + " (expected constant ints)");
      out.push_back(item->toInt());
    }
  } else {
    throw UnsupportedOp(what + " (expected a constant int list)");
  }
  if (width > 0 && out.size() == 1) out.assign(width, out[0]);
  if (width > 0 && out.size() != width)
    throw UnsupportedOp(what + " (wrong list length)");
  return out;
}

// Re-inserts reduced dims of a keepdim=False reduction so `grad` broadcasts
// against the input again.
Value* Unreduce(Emit& e, Value* grad, Value* input, Value* dims_value,
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

int64_t ConstInt(Value* v, const std::string& what) {
  auto iv = torch::jit::toIValue(v);
  if (!iv || !iv->isInt())
    throw UnsupportedOp(what + " (expected a constant int)");
  return iv->toInt();
}

void ExpectBatched(Value* v, const char* op) {
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
Value* CropSpatial(Emit& e, Value* r, Value* like) {
  Value* crop = e.int_list(
      {e.ci(0), e.op("aten::sub", {e.dim_size(like, 3), e.dim_size(r, 3)}),
       e.ci(0), e.op("aten::sub", {e.dim_size(like, 2), e.dim_size(r, 2)})});
  return e.op("aten::constant_pad_nd", {r, crop, e.c(0.0)});
}

// Gradient of conv2d(x, w) w.r.t. x for cotangent gy: the transposed
// convolution with the same parameters; output_padding (computed from the
// sizes at run time) restores the rows/cols the strided forward skipped.
Value* ConvInputGrad(Emit& e, Value* gy, Value* w, Value* x,
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
Value* ConvWeightGrad(Emit& e, Value* x, Value* gy, Value* w,
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

Value* BiasGrad(Emit& e, Value* g) {
  return e.op("aten::sum",
              {g, e.g.insertConstant(std::vector<int64_t>{0, 2, 3}),
               e.g.insertConstant(false)});
}

// Negates an int list (constant or ListConstruct of ints).
Value* NegatedIntList(Emit& e, Value* list) {
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

Value* Alpha(Node* n, size_t index) {
  return n->inputs().size() > index ? n->input(index) : nullptr;
}

Value* TimesAlpha(Emit& e, Value* grad, Value* alpha) {
  if (alpha == nullptr) return grad;
  auto iv = torch::jit::toIValue(alpha);
  if (iv && iv->toScalar().toDouble() == 1.0) return grad;
  return e.mul(grad, alpha);
}

const std::unordered_map<std::string, Rule>& Rules() {
  static const auto* rules = new std::unordered_map<std::string, Rule>{
      {"aten::add",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         Value* g = go[0];
         Grads r(n->inputs().size(), nullptr);
         r[0] = e.sum_to(g, n->input(0));
         if (IsTensor(n->input(1)))
           r[1] = e.sum_to(TimesAlpha(e, g, Alpha(n, 2)), n->input(1));
         return r;
       }},
      {"aten::sub",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         Value* g = go[0];
         Grads r(n->inputs().size(), nullptr);
         r[0] = e.sum_to(g, n->input(0));
         if (IsTensor(n->input(1))) {
           r[1] = e.sum_to(e.neg(TimesAlpha(e, g, Alpha(n, 2))), n->input(1));
         }
         return r;
       }},
      {"aten::rsub",  // other - alpha * self
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         Value* g = go[0];
         Grads r(n->inputs().size(), nullptr);
         r[0] = e.sum_to(e.neg(TimesAlpha(e, g, Alpha(n, 2))), n->input(0));
         if (IsTensor(n->input(1))) r[1] = e.sum_to(g, n->input(1));
         return r;
       }},
      {"aten::mul",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         Value* g = go[0];
         Grads r(n->inputs().size(), nullptr);
         r[0] = e.sum_to(e.mul(g, n->input(1)), n->input(0));
         if (IsTensor(n->input(1)))
           r[1] = e.sum_to(e.mul(g, n->input(0)), n->input(1));
         return r;
       }},
      {"aten::div",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         if (n->inputs().size() != 2)
           throw UnsupportedOp("aten::div with rounding_mode");
         Value* g = go[0];
         Grads r(2, nullptr);
         r[0] = e.sum_to(e.div(g, n->input(1)), n->input(0));
         if (IsTensor(n->input(1))) {
           // d(a/b)/db = -(a/b)/b
           r[1] = e.sum_to(e.neg(e.div(e.mul(g, n->output()), n->input(1))),
                           n->input(1));
         }
         return r;
       }},
      {"aten::neg",
       [](Emit& e, Node*, const Grads& go) -> Grads { return {e.neg(go[0])}; }},
      {"aten::exp",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         return {e.mul(go[0], n->output())};
       }},
      {"aten::log",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         return {e.div(go[0], n->input(0))};
       }},
      {"aten::tanh",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         Value* y = n->output();
         return {e.mul(go[0], e.op("aten::rsub", {e.mul(y, y), e.c(1.0)}))};
       }},
      {"aten::sigmoid",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         Value* y = n->output();
         return {e.mul(go[0], e.mul(y, e.op("aten::rsub", {y, e.c(1.0)})))};
       }},
      {"aten::relu",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         Value* mask =
             e.as_mask(e.op("aten::gt", {n->input(0), e.c(0.0)}), go[0]);
         return {e.mul(go[0], mask)};
       }},
      {"aten::sqrt",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         return {e.div(go[0], e.mul(n->output(), e.c(2.0)))};
       }},
      {"aten::pow",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         if (IsTensor(n->input(1)) || !IsTensor(n->input(0))) {
           throw UnsupportedOp("aten::pow with a tensor exponent");
         }
         const double c = ConstDouble(n->input(1));
         Value* local =
             c == 2.0 ? e.mul(n->input(0), e.c(2.0))
                      : e.mul(e.op("aten::pow", {n->input(0), e.c(c - 1.0)}),
                              e.c(c));
         return {e.mul(go[0], local), nullptr};
       }},
      {"aten::sin",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         return {e.mul(go[0], e.op("aten::cos", {n->input(0)}))};
       }},
      {"aten::cos",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         return {e.neg(e.mul(go[0], e.op("aten::sin", {n->input(0)})))};
       }},
      {"aten::erf",  // 2 / sqrt(pi) exp(-x^2)
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         Value* x = n->input(0);
         Value* bell = e.op("aten::exp", {e.neg(e.mul(x, x))});
         return {e.mul(go[0], e.mul(bell, e.c(M_2_SQRTPI)))};
       }},
      {"aten::abs",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         Value* x = n->input(0);
         Value* sign = e.sub(e.as_mask(e.op("aten::gt", {x, e.c(0.0)}), go[0]),
                             e.as_mask(e.op("aten::lt", {x, e.c(0.0)}), go[0]));
         return {e.mul(go[0], sign)};
       }},
      {"aten::where",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         // (where.Scalar* overloads: a scalar branch gets no gradient.)
         Value* zeros = e.zeros_like(go[0]);
         Grads r(3, nullptr);
         if (IsTensor(n->input(1))) {
           r[1] = e.sum_to(e.op("aten::where", {n->input(0), go[0], zeros}),
                           n->input(1));
         }
         if (IsTensor(n->input(2))) {
           r[2] = e.sum_to(e.op("aten::where", {n->input(0), zeros, go[0]}),
                           n->input(2));
         }
         return r;
       }},
      {"aten::type_as",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         return {e.op("aten::type_as", {go[0], n->input(0)}), nullptr};
       }},
      {"aten::clone",
       [](Emit&, Node* n, const Grads& go) -> Grads {
         Grads r(n->inputs().size(), nullptr);
         r[0] = go[0];
         return r;
       }},
      {"aten::contiguous",
       [](Emit&, Node* n, const Grads& go) -> Grads {
         Grads r(n->inputs().size(), nullptr);
         r[0] = go[0];
         return r;
       }},
      {"aten::sum",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         Grads r(n->inputs().size(), nullptr);
         Value* g = go[0];
         if (n->inputs().size() >= 3 &&
             n->input(1)->type()->kind() == c10::TypeKind::ListType) {
           auto keepdim = torch::jit::toIValue(n->input(2));
           g = Unreduce(e, g, n->input(0), n->input(1),
                        keepdim && keepdim->toBool());
         }
         r[0] =
             e.op("aten::type_as", {e.expand_as(g, n->input(0)), n->input(0)});
         return r;
       }},
      {"aten::mean",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         Grads r(n->inputs().size(), nullptr);
         Value* g = go[0];
         if (n->inputs().size() >= 3 &&
             n->input(1)->type()->kind() == c10::TypeKind::ListType) {
           auto keepdim = torch::jit::toIValue(n->input(2));
           g = Unreduce(e, g, n->input(0), n->input(1),
                        keepdim && keepdim->toBool());
         }
         // Each input element contributes 1 / (numel(in) / numel(out)).
         Value* spread = e.expand_as(g, n->input(0));
         r[0] =
             e.div(e.mul(spread, e.numel(n->output())), e.numel(n->input(0)));
         return r;
       }},
      {"aten::logsumexp",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         auto keepdim = torch::jit::toIValue(n->input(2));
         const bool kd = keepdim && keepdim->toBool();
         Value* g = Unreduce(e, go[0], n->input(0), n->input(1), kd);
         Value* out = Unreduce(e, n->output(), n->input(0), n->input(1), kd);
         Value* softmax = e.op("aten::exp", {e.sub(n->input(0), out)});
         return {e.mul(e.expand_as(g, n->input(0)), softmax), nullptr, nullptr};
       }},
      {"aten::amax",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         auto keepdim = torch::jit::toIValue(n->input(2));
         const bool kd = keepdim && keepdim->toBool();
         Value* g = Unreduce(e, go[0], n->input(0), n->input(1), kd);
         Value* out = Unreduce(e, n->output(), n->input(0), n->input(1), kd);
         // Ties share the gradient equally, as torch does.
         Value* mask = e.as_mask(e.op("aten::eq", {n->input(0), out}), go[0]);
         Value* count =
             e.op("aten::sum", {mask, n->input(1), e.g.insertConstant(true)});
         return {e.mul(e.expand_as(g, n->input(0)), e.div(mask, count)),
                 nullptr, nullptr};
       }},
      {"aten::reshape",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         return {e.op("aten::reshape", {go[0], e.size(n->input(0))}), nullptr};
       }},
      {"aten::view",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         return {e.op("aten::reshape", {go[0], e.size(n->input(0))}), nullptr};
       }},
      {"aten::expand",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         Grads r(n->inputs().size(), nullptr);
         r[0] = e.sum_to(go[0], n->input(0));
         return r;
       }},
      {"aten::sum_to_size",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         return {e.expand_as(go[0], n->input(0)), nullptr};
       }},
      {"aten::t",
       [](Emit& e, Node*, const Grads& go) -> Grads {
         return {e.op("aten::t", {go[0]})};
       }},
      {"aten::transpose",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         return {e.op("aten::transpose", {go[0], n->input(1), n->input(2)}),
                 nullptr, nullptr};
       }},
      {"aten::unsqueeze",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         return {e.op("aten::reshape", {go[0], e.size(n->input(0))}), nullptr};
       }},
      {"aten::squeeze",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         Grads r(n->inputs().size(), nullptr);
         r[0] = e.op("aten::reshape", {go[0], e.size(n->input(0))});
         return r;
       }},
      {"aten::mm",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         Value* g = go[0];
         return {e.op("aten::mm", {g, e.op("aten::t", {n->input(1)})}),
                 e.op("aten::mm", {e.op("aten::t", {n->input(0)}), g})};
       }},
      {"aten::flatten",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         Grads r(n->inputs().size(), nullptr);
         r[0] = e.op("aten::reshape", {go[0], e.size(n->input(0))});
         return r;
       }},
      {"aten::permute",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         std::vector<int64_t> dims =
             ConstIntList(n->input(1), "aten::permute dims");
         const int64_t rank = static_cast<int64_t>(dims.size());
         std::vector<int64_t> inverse(dims.size());
         for (int64_t i = 0; i < rank; ++i) {
           const int64_t d = dims[i] < 0 ? dims[i] + rank : dims[i];
           inverse[d] = i;
         }
         return {e.op("aten::permute", {go[0], e.g.insertConstant(inverse)}),
                 nullptr};
       }},
      {"aten::constant_pad_nd",  // crop by the negated pads
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         Grads r(n->inputs().size(), nullptr);
         r[0] = e.op("aten::constant_pad_nd",
                     {go[0], NegatedIntList(e, n->input(1)), e.c(0.0)});
         return r;
       }},
      {"aten::conv2d",  // (x, w, b, stride, padding, dilation, groups)
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         ExpectBatched(n->input(0), "aten::conv2d");
         if (!IsTensor(n->input(4)) &&
             n->input(4)->type()->kind() == c10::TypeKind::StringType) {
           throw UnsupportedOp(
               "aten::conv2d with string padding (decompose first)");
         }
         ConvParams c{ConstIntList(n->input(3), "aten::conv2d stride", 2),
                      ConstIntList(n->input(4), "aten::conv2d padding", 2),
                      ConstIntList(n->input(5), "aten::conv2d dilation", 2),
                      ConstInt(n->input(6), "aten::conv2d groups")};
         Grads r(n->inputs().size(), nullptr);
         r[0] = ConvInputGrad(e, go[0], n->input(1), n->input(0), c);
         r[1] = ConvWeightGrad(e, n->input(0), go[0], n->input(1), c);
         if (IsTensor(n->input(2))) r[2] = BiasGrad(e, go[0]);
         return r;
       }},
      {"aten::conv_transpose2d",  // (u, w, b, stride, padding, output_padding,
                                  // groups, dilation)
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         ExpectBatched(n->input(0), "aten::conv_transpose2d");
         ConvParams c{
             ConstIntList(n->input(3), "aten::conv_transpose2d stride", 2),
             ConstIntList(n->input(4), "aten::conv_transpose2d padding", 2),
             ConstIntList(n->input(7), "aten::conv_transpose2d dilation", 2),
             ConstInt(n->input(6), "aten::conv_transpose2d groups")};
         Grads r(n->inputs().size(), nullptr);
         // The transposed convolution is the adjoint of conv2d(., w): its
         // adjoint is conv2d again, and the weight rule is conv2d's with
         // input and cotangent exchanged.
         r[0] =
             e.op("aten::conv2d",
                  {go[0], n->input(1), e.g.insertConstant(c10::IValue()),
                   e.g.insertConstant(c.stride), e.g.insertConstant(c.padding),
                   e.g.insertConstant(c.dilation), e.ci(c.groups)});
         // An output_padding >= stride (allowed when below the dilation)
         // adds rows no input row reaches: drop them.
         // (A run-time output_padding, as ConvInputGrad makes, is cropped
         // too: a no-op when it is below the stride.)
         bool crop = true;
         if (torch::jit::toIValue(n->input(5)) ||
             n->input(5)->node()->kind() != torch::jit::prim::ListConstruct ||
             std::all_of(n->input(5)->node()->inputs().begin(),
                         n->input(5)->node()->inputs().end(), [](Value* v) {
                           return torch::jit::toIValue(v).has_value();
                         })) {
           auto op = ConstIntList(n->input(5),
                                  "aten::conv_transpose2d output_padding", 2);
           crop = op[0] >= c.stride[0] || op[1] >= c.stride[1];
         }
         if (crop) {
           r[0] = CropSpatial(e, r[0], n->input(0));
         }
         r[1] = ConvWeightGrad(e, go[0], n->input(0), n->input(1), c);
         if (IsTensor(n->input(2))) r[2] = BiasGrad(e, go[0]);
         return r;
       }},
      {"aten::max_pool2d_with_indices",  // outputs (values, indices)
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         Grads r(n->inputs().size(), nullptr);
         if (go[0] == nullptr) return r;
         // Indices are flat positions in each input plane: scatter the
         // gradient there over the flattened spatial dims.
         Value* x = n->input(0);
         auto flat = [&](Value* v) {
           return e.op("aten::flatten", {v, e.ci(-2), e.ci(-1)});
         };
         Value* plane = e.zeros_like(flat(x));
         Value* scattered =
             e.op("aten::scatter_add",
                  {plane, e.ci(-1), flat(n->output(1)), flat(go[0])});
         r[0] = e.op("aten::reshape", {scattered, e.size(x)});
         return r;
       }},
      {"aten::gather",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         Grads r(n->inputs().size(), nullptr);
         r[0] = e.op("aten::scatter_add", {e.zeros_like(n->input(0)),
                                           n->input(1), n->input(2), go[0]});
         return r;
       }},
      {"aten::scatter_add",  // (self, dim, index, src)
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         // Only src's leading index-shaped block is read: the gathered
         // gradient is zero-padded back to src's shape where they differ.
         Value* src = n->input(3);
         Value* index = n->input(2);
         Value* picked = e.op("aten::gather", {go[0], n->input(1), index});
         auto src_type = src->type()->cast<c10::TensorType>();
         auto index_type = index->type()->cast<c10::TensorType>();
         auto src_sizes =
             src_type ? src_type->sizes().concrete_sizes() : c10::nullopt;
         auto index_sizes =
             index_type ? index_type->sizes().concrete_sizes() : c10::nullopt;
         auto src_rank = src_type ? src_type->dim() : c10::nullopt;
         const bool same_shape =
             src_sizes && index_sizes && *src_sizes == *index_sizes;
         // Without a static rank the node comes from a rule (gather's,
         // max_pool2d_with_indices'), where src is index-shaped.
         if (!same_shape && src_rank) {
           std::vector<Value*> pad;
           for (int64_t d = static_cast<int64_t>(*src_rank) - 1; d >= 0; --d) {
             pad.push_back(e.ci(0));
             pad.push_back(
                 e.op("aten::sub", {e.dim_size(src, d), e.dim_size(index, d)}));
           }
           picked = e.op("aten::constant_pad_nd",
                         {picked, e.int_list(pad), e.c(0.0)});
         }
         return {go[0], nullptr, nullptr, picked};
       }},
  };
  return *rules;
}

// Ops whose outputs carry no gradient (masks, shapes, fresh constants,
// anything with no tensor output such as integer arithmetic on sizes).
bool IsNonDifferentiable(const Node* n) {
  static const std::unordered_set<std::string> kOps = {"aten::gt",
                                                       "aten::lt",
                                                       "aten::ge",
                                                       "aten::le",
                                                       "aten::eq",
                                                       "aten::size",
                                                       "aten::numel",
                                                       "aten::zeros_like",
                                                       "aten::ones_like",
                                                       "prim::Constant",
                                                       "prim::ListConstruct",
                                                       "prim::NumToTensor",
                                                       "aten::argmax",
                                                       "aten::argmin"};
  if (kOps.count(OpName(n)) > 0) return true;
  // Scalars and lists of scalars only (sizes, flags): a tuple or list that
  // may hold tensors is not waved through (it has no rule: UnsupportedOp).
  auto scalar = [](const c10::TypePtr& t) {
    switch (t->kind()) {
      case c10::TypeKind::IntType:
      case c10::TypeKind::FloatType:
      case c10::TypeKind::BoolType:
      case c10::TypeKind::NoneType:
      case c10::TypeKind::StringType:
      case c10::TypeKind::DeviceObjType:
        return true;
      default:
        return false;
    }
  };
  for (const Value* out : n->outputs()) {
    const auto& type = out->type();
    auto list = type->cast<c10::ListType>();
    if (!scalar(type) && !(list && scalar(list->getElementType())))
      return false;
  }
  return true;
}

// Multi-output ops with a rule (the rule reads the cotangents it needs).
bool HasMultiOutputRule(const std::string& name) {
  return name == "aten::max_pool2d_with_indices";
}

Grads AdamRule(Emit& e, Node* n, const Grads& go);

}  // namespace

bool HasDerivativeRule(const Node* node) {
  const std::string name = OpName(node);
  return Rules().count(name) > 0 || IsNonDifferentiable(node) ||
         name == "metafuse::adam";
}

std::vector<Value*> AppendVjp(Graph& graph, const std::vector<Value*>& outputs,
                              const std::vector<Value*>& seeds,
                              const std::vector<Value*>& wrt) {
  TORCH_CHECK(outputs.size() == seeds.size(),
              "AppendVjp: one seed per output expected");
  // Values that depend on `wrt`: only those need gradients.
  std::unordered_set<const Value*> active(wrt.begin(), wrt.end());
  std::vector<Node*> order;
  for (Node* node : graph.nodes()) {
    bool depends = false;
    for (Value* in : node->inputs()) depends = depends || active.count(in);
    if (!depends) continue;
    // A list that carries a differentiated tensor must not silently stop the
    // gradient: only ops with a rule may consume such lists.
    if (node->kind() == torch::jit::prim::ListConstruct) {
      for (Value* use_site : node->outputs()) {
        for (const auto& use : use_site->uses()) {
          if (Rules().count(OpName(use.user)) == 0) {
            throw UnsupportedOp(OpName(use.user) +
                                " (a list of differentiated tensors)");
          }
        }
      }
    }
    if (IsNonDifferentiable(node)) continue;
    for (Value* out : node->outputs()) active.insert(out);
    order.push_back(node);
  }
  torch::jit::WithInsertPoint guard(graph.return_node());
  Emit e{graph};
  std::unordered_map<const Value*, Value*> grads;
  auto accumulate = [&](Value* v, Value* g) {
    auto it = grads.find(v);
    grads[v] = it == grads.end() ? g : e.add(it->second, g);
  };
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (active.count(outputs[i])) accumulate(outputs[i], seeds[i]);
  }
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node* node = *it;
    Grads grad_outputs;
    bool any = false;
    for (Value* out : node->outputs()) {
      auto found = grads.find(out);
      grad_outputs.push_back(found == grads.end() ? nullptr : found->second);
      any = any || found != grads.end();
    }
    if (!any) continue;
    const std::string name = OpName(node);
    Grads input_grads;
    if (name == "metafuse::adam") {
      input_grads = AdamRule(e, node, grad_outputs);
    } else {
      auto rule = Rules().find(name);
      if (rule == Rules().end()) throw UnsupportedOp(name);
      if (node->outputs().size() != 1 && !HasMultiOutputRule(name))
        throw UnsupportedOp(name);
      try {
        input_grads = rule->second(e, node, grad_outputs);
      } catch (const c10::Error& error) {
        // An argument form the rule does not handle (its emitted call did
        // not match a schema): a named UnsupportedOp, so callers fall back.
        throw UnsupportedOp(name + " (" + error.what_without_backtrace() + ")");
      }
    }
    for (size_t i = 0; i < input_grads.size() && i < node->inputs().size();
         ++i) {
      if (input_grads[i] != nullptr && active.count(node->input(i)) &&
          IsTensor(node->input(i))) {
        accumulate(node->input(i), input_grads[i]);
      }
    }
  }
  std::vector<Value*> result;
  for (Value* w : wrt) {
    auto found = grads.find(w);
    result.push_back(found != grads.end() ? found->second : e.zeros_like(w));
  }
  return result;
}

namespace {

// metafuse::adam(grad, mu, nu, param?, *, count, lr, b1, b2, eps, eps_root,
// weight_decay, decoupled_weight_decay, maximize) -> (update, mu', nu').
// Closed form (g' = +-grad (+ wd * param when coupled)):
//   mu' = b1 mu + (1 - b1) g'          nu' = b2 nu + (1 - b2) g'^2
//   s = sqrt(nu' / bc2 + eps_root)     d = s + eps
//   update = -lr (mu' / bc1) / d  (- lr wd param when decoupled)
// Cotangents (gu, gm, gn) of (update, mu', nu'):
//   gm_total = gm - gu lr / (bc1 d)
//   gn_total = gn + gu lr (mu' / bc1) / (2 bc2 s d^2)
//   d grad  = +-((1 - b1) gm_total + 2 (1 - b2) g' gn_total)
//   d mu    = b1 gm_total            d nu = b2 gn_total
//   d param = wd d g' (coupled)  or  -lr wd gu (decoupled)
Grads AdamRule(Emit& e, Node* n, const Grads& go) {
  auto constant = [&](const char* name) {
    auto iv = torch::jit::toIValue(n->namedInput(Symbol::attr(name)));
    if (!iv)
      throw UnsupportedOp("metafuse::adam with non-constant hyperparameters");
    return *iv;
  };
  const int64_t count = constant("count").toInt();
  const double lr = constant("lr").toDouble(), b1 = constant("b1").toDouble(),
               b2 = constant("b2").toDouble(), eps = constant("eps").toDouble(),
               eps_root = constant("eps_root").toDouble(),
               wd = constant("weight_decay").toDouble();
  const bool decoupled = constant("decoupled_weight_decay").toBool(),
             maximize = constant("maximize").toBool();
  const double bc1 = 1.0 - std::pow(b1, count), bc2 = 1.0 - std::pow(b2, count);
  Value* grad = n->input(0);
  Value* param = n->input(3);
  const bool has_param = param->type()->kind() != c10::TypeKind::NoneType;
  Value* mu_new = n->output(1);
  Value* nu_new = n->output(2);
  Value* gu = go[0] ? go[0] : e.zeros_like(n->output(0));
  Value* gm = go[1] ? go[1] : e.zeros_like(mu_new);
  Value* gn = go[2] ? go[2] : e.zeros_like(nu_new);
  // g' as the op saw it.
  Value* g_eff = maximize ? e.neg(grad) : grad;
  if (!decoupled && wd != 0.0 && has_param)
    g_eff = e.add(g_eff, e.mul(param, e.c(wd)));
  Value* s =
      e.op("aten::sqrt", {e.add(e.div(nu_new, e.c(bc2)), e.c(eps_root))});
  Value* d = e.add(s, e.c(eps));
  Value* gm_total = e.sub(gm, e.div(e.mul(gu, e.c(lr / bc1)), d));
  Value* numerator = e.mul(e.mul(gu, mu_new), e.c(lr / (2.0 * bc1 * bc2)));
  Value* gn_total = e.add(gn, e.div(numerator, e.mul(s, e.mul(d, d))));
  Value* d_geff = e.add(e.mul(gm_total, e.c(1.0 - b1)),
                        e.mul(e.mul(g_eff, gn_total), e.c(2.0 * (1.0 - b2))));
  Grads r(n->inputs().size(), nullptr);
  r[0] = maximize ? e.neg(d_geff) : d_geff;
  r[1] = e.mul(gm_total, e.c(b1));
  r[2] = e.mul(gn_total, e.c(b2));
  if (has_param && wd != 0.0) {
    r[3] = decoupled ? e.mul(gu, e.c(-lr * wd)) : e.mul(d_geff, e.c(wd));
  }
  return r;
}

}  // namespace
}  // namespace metafuse::compiler
