// Decompositions of normalization layers and norms (decompose_rewrite.h):
// batch, layer, group and instance norm (and the native_* forms functorch's
// batching rules emit), vector norms, variance and standard deviation.
// Statistics are the batch mean and the biased variance (mean of squared
// deviations), as eager's; where eager's backward masks a zero norm or standard
// deviation instead of dividing by it, SqrtZeroSafe does the same.
#include <torch/csrc/jit/ir/constants.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "compiler/decompose/decompose_rewrite.h"
#include "compiler/ir/ir_helpers.h"

namespace metafuse::compiler::decompose_internal {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

namespace {

// x * weight + bias with [C] weight and bias broadcast along dim 1 of a
// rank-`rank` x; either may be None.
Value* ChannelAffine(Graph& g, Value* x, Value* weight, Value* bias,
                     int64_t rank) {
  std::vector<int64_t> channel_shape(rank, 1);
  channel_shape[1] = -1;
  Value* shape = g.insertConstant(channel_shape);
  if (!IsNone(weight)) {
    x = InsertOp(g, "aten::mul",
                 {x, InsertOp(g, "aten::reshape", {weight, shape})});
  }
  if (!IsNone(bias)) {
    x = InsertOp(g, "aten::add",
                 {x, InsertOp(g, "aten::reshape", {bias, shape})});
  }
  return x;
}

// batch_norm(x, weight, bias, running_mean, running_var, training, momentum,
// eps, cudnn): normalizes over every dim but 1. Training mode (or no running
// statistics) uses the batch mean and the biased batch variance (mean of
// squared deviations), as batch_norm does; eval mode uses the running
// statistics as constants. The running-statistics update of training mode
// is a side effect the compiled program does not perform (warned).
Value* BatchNorm(Graph& g, Node* n) {
  const int64_t rank = TensorRank(n->input(0));
  auto training = ConstantOf(n->input(5));
  auto eps = ConstantOf(n->input(7));
  if (rank < 2 || !training || !eps) {
    return Reject(
        "an input of known rank >= 2 and constant `training` and `eps` "
        "expected");
  }
  Value *x = n->input(0), *weight = n->input(1), *bias = n->input(2),
        *running_mean = n->input(3), *running_var = n->input(4);
  const bool batch_stats =
      training->toBool() || IsNone(running_mean) || IsNone(running_var);
  if (training->toBool() && (!IsNone(running_mean) || !IsNone(running_var))) {
    TORCH_WARN(
        "metafuse compiler: aten::batch_norm in training mode normalizes with "
        "batch "
        "statistics exactly as eager, but the compiled program does not update "
        "running_mean/running_var (nor num_batches_tracked); update them "
        "outside the "
        "compiled call, or use track_running_stats=False, if you need them.");
  }
  std::vector<int64_t> dims = {0}, channel_shape(rank, 1);
  for (int64_t d = 2; d < rank; ++d) dims.push_back(d);
  channel_shape[1] = -1;
  Value* shape = g.insertConstant(channel_shape);
  Value* out;
  if (batch_stats) {
    out = NormalizeOver(g, x, dims, eps->toDouble());
  } else {
    Value* centered =
        InsertOp(g, "aten::sub",
                 {x, InsertOp(g, "aten::reshape", {running_mean, shape})});
    Value* var = InsertOp(g, "aten::reshape", {running_var, shape});
    Value* std = InsertOp(
        g, "aten::sqrt",
        {InsertOp(g, "aten::add", {var, g.insertConstant(eps->toDouble())})});
    out = InsertOp(g, "aten::div", {centered, std});
  }
  return ChannelAffine(g, out, weight, bias, rank);
}

// layer_norm(x, normalized_shape, weight, bias, eps, cudnn): normalized
// over the trailing len(normalized_shape) dims, then the elementwise affine.
Value* LayerNorm(Graph& g, Node* n) {
  const int64_t rank = TensorRank(n->input(0));
  auto shape = ConstantIntList(n->input(1));
  auto eps = ConstantOf(n->input(4));
  if (rank < 1 || !shape || !eps || shape->empty() ||
      static_cast<int64_t>(shape->size()) > rank) {
    return Reject(
        "an input of known rank, a constant normalized_shape and eps expected");
  }
  std::vector<int64_t> dims;
  for (int64_t d = rank - static_cast<int64_t>(shape->size()); d < rank; ++d)
    dims.push_back(d);
  Value* out = NormalizeOver(g, n->input(0), dims, eps->toDouble());
  if (!IsNone(n->input(2))) out = InsertOp(g, "aten::mul", {out, n->input(2)});
  if (!IsNone(n->input(3))) out = InsertOp(g, "aten::add", {out, n->input(3)});
  return out;
}

// Group norm of a [N, C, *] x over `groups` groups of C / groups channels:
// the statistics of each (image, group) over its channels and positions,
// then the per-channel affine.
Value* GroupNorm(Graph& g, Value* x, int64_t groups, Value* weight, Value* bias,
                 double eps) {
  auto sizes = StaticSizes(x);
  if (!sizes || sizes->size() < 2 || groups <= 0 || (*sizes)[1] % groups != 0) {
    return Reject(
        "a [N, C, *] input of static shape with C divisible by num_groups "
        "expected");
  }
  const int64_t rank = static_cast<int64_t>(sizes->size());
  const int64_t per_group =
      (*sizes)[0] == 0 ? 0 : Count(*sizes) / (*sizes)[0] / groups;
  const std::vector<int64_t> grouped_sizes = {(*sizes)[0], groups, per_group};
  Value* grouped =
      InsertOp(g, "aten::reshape", {x, g.insertConstant(grouped_sizes)});
  grouped->setType(
      x->type()->expect<c10::TensorType>()->withSizes(grouped_sizes));
  Value* normalized = NormalizeOver(g, grouped, {2}, eps);
  Value* out =
      InsertOp(g, "aten::reshape", {normalized, g.insertConstant(*sizes)});
  return ChannelAffine(g, out, weight, bias, rank);
}

// The vector norm of x over `dims` (all when empty): ord 2, 1 or inf.
Value* VectorNorm(Graph& g, Value* x, double ord, std::vector<int64_t> dims,
                  bool keepdim) {
  const int64_t rank = TensorRank(x);
  if (rank < 0) return Reject("an input of known rank expected");
  if (dims.empty()) {
    for (int64_t d = 0; d < rank; ++d) dims.push_back(d);
  }
  Value* dims_value = g.insertConstant(dims);
  Value* keep = g.insertConstant(keepdim);
  if (ord == 2.0) {
    Value* squares = WithTypeOf(InsertOp(g, "aten::mul", {x, x}), x);
    return SqrtZeroSafe(g,
                        InsertOp(g, "aten::sum", {squares, dims_value, keep}));
  }
  Value* magnitude = WithTypeOf(InsertOp(g, "aten::abs", {x}), x);
  if (ord == 1.0) {
    return InsertOp(g, "aten::sum", {magnitude, dims_value, keep});
  }
  if (std::isinf(ord) && ord > 0)
    return InsertOp(g, "aten::amax", {magnitude, dims_value, keep});
  return Reject("ord 1, 2 or inf expected");
}

// The dims a reduction argument names (None or [] : every dim).
std::optional<std::vector<int64_t>> ReductionDims(Value* dim) {
  if (IsNone(dim)) return std::vector<int64_t>{};
  return ConstantIntList(dim);
}

// var / std (self, unbiased) or (self, dim, unbiased | correction, keepdim):
// sum((x - mean)^2) / (n - correction) over the reduced dims.
Value* Variance(Graph& g, Node* n, bool standard_deviation) {
  auto sizes = StaticSizes(n->input(0));
  if (!sizes) return Reject("an input of static shape expected");
  const int64_t rank = static_cast<int64_t>(sizes->size());
  std::vector<int64_t> dims;
  double correction = 1.0;
  bool keepdim = false;
  if (n->inputs().size() == 2) {
    auto unbiased = ConstantOf(n->input(1));
    if (!unbiased || !unbiased->isBool())
      return Reject("a constant `unbiased` expected");
    correction = unbiased->toBool() ? 1.0 : 0.0;
  } else if (n->inputs().size() == 4) {
    auto reduced = ReductionDims(n->input(1));
    auto third = ConstantOf(n->input(2)), keep = ConstantOf(n->input(3));
    if (!reduced || !third || !keep || !keep->isBool())
      return Reject("constant dims, correction and keepdim expected");
    dims = *reduced;
    if (third->isBool())
      correction = third->toBool() ? 1.0 : 0.0;
    else if (third->isInt())
      correction = static_cast<double>(third->toInt());
    else if (!third->isNone())
      return Reject("an int or bool correction expected");
    keepdim = keep->toBool();
  } else {
    return Reject(
        "the (self, unbiased) or (self, dim, correction, keepdim) form "
        "expected");
  }
  if (dims.empty()) {
    for (int64_t d = 0; d < rank; ++d) dims.push_back(d);
  }
  double count = 1.0;
  for (int64_t& d : dims) {
    if (d < 0) d += rank;
    if (d < 0 || d >= rank) return Reject("dim out of range");
    count *= static_cast<double>((*sizes)[d]);
  }
  if (count - correction <= 0.0)
    return Reject("more elements than the correction expected");
  Value* x = n->input(0);
  Value* dims_value = g.insertConstant(dims);
  Value* mean =
      InsertOp(g, "aten::mean", {x, dims_value, g.insertConstant(true)});
  Value* centered = WithTypeOf(InsertOp(g, "aten::sub", {x, mean}), x);
  Value* squares =
      WithTypeOf(InsertOp(g, "aten::mul", {centered, centered}), x);
  Value* total = InsertOp(g, "aten::sum",
                          {squares, dims_value, g.insertConstant(keepdim)});
  Value* var =
      InsertOp(g, "aten::div", {total, g.insertConstant(count - correction)});
  return standard_deviation ? SqrtZeroSafe(g, var) : var;
}

}  // namespace

// Normalizes x over `dims` with the batch mean and biased variance:
// (x - mean) / sqrt(mean((x - mean)^2) + eps).
Value* NormalizeOver(Graph& g, Value* x, const std::vector<int64_t>& dims,
                     double eps) {
  Value* dims_value = g.insertConstant(dims);
  Value* mean =
      InsertOp(g, "aten::mean", {x, dims_value, g.insertConstant(true)});
  Value* centered = InsertOp(g, "aten::sub", {x, mean});
  Value* var = InsertOp(g, "aten::mean",
                        {InsertOp(g, "aten::mul", {centered, centered}),
                         dims_value, g.insertConstant(true)});
  Value* std =
      InsertOp(g, "aten::sqrt",
               {InsertOp(g, "aten::add", {var, g.insertConstant(eps)})});
  return InsertOp(g, "aten::div", {centered, std});
}

const RewriteTable& NormalizationRewrites() {
  static const auto* rewrites = new RewriteTable{
      {"aten::batch_norm",
       [](Graph& g, Node* n) -> Value* { return BatchNorm(g, n); }},
      {"aten::layer_norm",
       [](Graph& g, Node* n) -> Value* { return LayerNorm(g, n); }},
      {"aten::group_norm",  // (x, num_groups, weight, bias, eps, cudnn)
       [](Graph& g, Node* n) -> Value* {
         auto groups = ConstantOf(n->input(1));
         auto eps = ConstantNumber(n->input(4));
         if (!groups || !groups->isInt() || !eps) {
           return Reject("constant num_groups and eps expected");
         }
         return GroupNorm(g, n->input(0), groups->toInt(), n->input(2),
                          n->input(3), *eps);
       }},
      {"aten::instance_norm",
       // (x, weight, bias, running_mean, running_var, use_input_stats,
       // momentum, eps, cudnn): each (image, channel) over its positions
       [](Graph& g, Node* n) -> Value* {
         const int64_t rank = TensorRank(n->input(0));
         auto use_input_stats = ConstantOf(n->input(5));
         auto eps = ConstantNumber(n->input(7));
         if (rank < 3 || !use_input_stats || !eps) {
           return Reject(
               "a [N, C, *] input and constant use_input_stats and eps "
               "expected");
         }
         if (!use_input_stats->toBool() || !IsNone(n->input(3)) ||
             !IsNone(n->input(4))) {
           return Reject(
               "input statistics without running statistics expected "
               "(track_running_stats "
               "updates them in place: not compiled)");
         }
         std::vector<int64_t> dims;
         for (int64_t d = 2; d < rank; ++d) dims.push_back(d);
         return ChannelAffine(g, NormalizeOver(g, n->input(0), dims, *eps),
                              n->input(1), n->input(2), rank);
       }},
      {"aten::linalg_vector_norm",  // (x, ord, dim, keepdim, dtype)
       [](Graph& g, Node* n) -> Value* {
         auto ord = ConstantNumber(n->input(1));
         auto dims = ReductionDims(n->input(2));
         auto keepdim = ConstantOf(n->input(3));
         if (!ord || !dims || !keepdim ||
             !(IsNone(n->input(4)) || IsInputDtype(n->input(4), n->input(0)))) {
           return Reject(
               "constant ord, dim and keepdim and no dtype conversion "
               "expected");
         }
         return VectorNorm(g, n->input(0), *ord, *dims, keepdim->toBool());
       }},
      {"aten::norm",  // (x, p) or (x, p, dim, keepdim)
       [](Graph& g, Node* n) -> Value* {
         auto ord = IsNone(n->input(1)) ? std::optional<double>(2.0)
                                        : ConstantNumber(n->input(1));
         if (!ord) return Reject("a constant p expected");
         if (n->inputs().size() == 2)
           return VectorNorm(g, n->input(0), *ord, {}, false);
         if (n->inputs().size() != 4)
           return Reject("the (x, p) or (x, p, dim, keepdim) form expected");
         auto dims = ConstantIntList(n->input(2));
         auto keepdim = ConstantOf(n->input(3));
         if (!dims || !keepdim)
           return Reject("constant dim and keepdim expected");
         return VectorNorm(g, n->input(0), *ord, *dims, keepdim->toBool());
       }},
      {"aten::frobenius_norm",  // (x) or (x, dim, keepdim)
       [](Graph& g, Node* n) -> Value* {
         if (n->inputs().size() == 1)
           return VectorNorm(g, n->input(0), 2.0, {}, false);
         auto dims = ConstantIntList(n->input(1));
         auto keepdim = ConstantOf(n->input(2));
         if (!dims || !keepdim)
           return Reject("constant dim and keepdim expected");
         return VectorNorm(g, n->input(0), 2.0, *dims, keepdim->toBool());
       }},
      {"aten::var",
       [](Graph& g, Node* n) -> Value* { return Variance(g, n, false); }},
      {"aten::std",
       [](Graph& g, Node* n) -> Value* { return Variance(g, n, true); }},
  };
  return *rewrites;
}

// A native_* normalization (out, mean, rstd) of `arity` arguments whose
// statistics nothing reads: `output` writes out; the statistics need no
// replacement.
MultiRewrite OutputOnly(size_t arity, Rewrite output) {
  return [arity, output](Graph& g, Node* n) -> std::vector<Value*> {
    if (n->inputs().size() != arity || n->output(1)->hasUses() ||
        n->output(2)->hasUses())
      return {};
    Value* out = output(g, n);
    if (out == nullptr) return {};
    return {out, nullptr, nullptr};
  };
}

// The forms functorch's batching rules emit (for BatchNorm with the tasks
// folded into the channels).
const MultiRewriteTable& NormalizationMultiRewrites() {
  static const auto* rewrites = new MultiRewriteTable{
      // (x, weight, bias, running_mean, running_var, training, momentum, eps)
      {"aten::native_batch_norm", OutputOnly(8, BatchNorm)},
      // (x, normalized_shape, weight, bias, eps): layer_norm's first five
      {"aten::native_layer_norm", OutputOnly(5, LayerNorm)},
      // (x, weight, bias, N, C, HxW, group, eps)
      {"aten::native_group_norm",
       OutputOnly(8,
                  [](Graph& g, Node* n) -> Value* {
                    auto groups = ConstantOf(n->input(6));
                    auto eps = ConstantNumber(n->input(7));
                    if (!groups || !groups->isInt() || !eps)
                      return Reject("constant group and eps expected");
                    return GroupNorm(g, n->input(0), groups->toInt(),
                                     n->input(1), n->input(2), *eps);
                  })},
  };
  return *rewrites;
}

}  // namespace metafuse::compiler::decompose_internal
