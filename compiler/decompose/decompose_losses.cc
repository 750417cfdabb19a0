// Decompositions of loss functions (decompose_rewrite.h): squared, absolute,
// smooth L1 and Huber errors, negative log-likelihood and cross-entropy
// (class indices or probabilities, label smoothing), binary cross-entropy
// of logits, Kullback-Leibler divergence. Reductions
// 0 (none), 1 (mean) and 2 (sum), as ATen numbers them. Class weights and
// an ignore_index that is a valid class are not compiled (declined with the
// reason); a target equal to a negative ignore_index is an out-of-range
// index error at run time, never a silently different loss.
#include <torch/csrc/jit/ir/constants.h>
#include <torch/torch.h>

#include <cmath>

#include "compiler/decompose/decompose_rewrite.h"
#include "compiler/ir/ir_helpers.h"

namespace metafuse::compiler::decompose_internal {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

namespace {

// The reduction argument at `index` of n: 0, 1 or 2, or -1.
int64_t ReductionOf(Node* n, size_t index) {
  auto reduction = ConstantOf(n->input(index));
  if (!reduction || !reduction->isInt() || reduction->toInt() < 0 ||
      reduction->toInt() > 2)
    return -1;
  return reduction->toInt();
}

Value* Reduce(Graph& g, Value* x, int64_t reduction) {
  if (reduction == 0) return x;
  return InsertOp(g, reduction == 1 ? "aten::mean" : "aten::sum", {x});
}

// -log_probs at each target class (class dim 1), reduced.
Value* NegativeLogLikelihood(Graph& g, Value* log_probs, Value* target,
                             int64_t reduction) {
  Value* one = g.insertConstant(1);
  Value* index = InsertOp(g, "aten::unsqueeze", {target, one});
  Value* picked = InsertOp(g, "aten::gather", {log_probs, one, index});
  if (auto target_sizes = StaticSizes(target);
      target_sizes && IsTensor(log_probs)) {
    target_sizes->insert(target_sizes->begin() + 1, 1);
    picked->setType(
        log_probs->type()->expect<c10::TensorType>()->withSizes(*target_sizes));
  }
  picked = InsertOp(g, "aten::squeeze", {picked, one});
  return Reduce(g, InsertOp(g, "aten::neg", {picked}), reduction);
}

// nll_loss / nll_loss_nd / cross_entropy_loss arguments this file compiles:
// input [N, C, *], class-index target [N, *], no class weights, and an
// ignore_index no class can equal.
const char* ClassIndexProblem(Node* n, Value* input, Value* target) {
  const int64_t rank = TensorRank(input);
  if (rank < 2 || TensorRank(target) != rank - 1)
    return "an [N, C, *] input and an [N, *] class-index target expected";
  if (!IsNone(n->input(2))) return "class weights are not compiled";
  auto ignore = ConstantOf(n->input(4));
  if (!ignore || !ignore->isInt() || ignore->toInt() >= 0)
    return "a negative ignore_index expected (a class's index is not compiled)";
  return nullptr;
}

// (a - b) elementwise error with |a - b| < threshold inside, and its
// reduction: smooth L1 and Huber.
Value* PiecewiseError(Graph& g, Value* a, Value* b, int64_t reduction,
                      double threshold, bool huber) {
  Value* d = InsertOp(g, "aten::sub", {a, b});
  if (StaticSizes(a) && StaticSizes(a) == StaticSizes(b)) WithTypeOf(d, a);
  Value* z = WithTypeOf(InsertOp(g, "aten::abs", {d}), d);
  Value* half_square =
      InsertOp(g, "aten::mul",
               {InsertOp(g, "aten::mul", {d, d}),
                g.insertConstant(huber ? 0.5 : 0.5 / threshold)});
  Value* linear =
      InsertOp(g, "aten::sub", {z, g.insertConstant(0.5 * threshold)});
  if (huber)
    linear = InsertOp(g, "aten::mul", {linear, g.insertConstant(threshold)});
  return Reduce(
      g, Select(g, "aten::lt", z, Filled(g, z, threshold), half_square, linear),
      reduction);
}

// smooth_l1_loss (a, b, reduction, beta) / huber_loss (a, b, reduction,
// delta). Beta 0 (L1) is declined: eager's gradient at a zero difference is
// then +1, not abs's 0.
Value* PiecewiseLoss(Graph& g, Node* n, bool huber) {
  const int64_t reduction = ReductionOf(n, 2);
  auto threshold = ConstantNumber(n->input(3));
  if (reduction < 0 || !threshold || *threshold <= 0) {
    return Reject(huber ? "a constant reduction and delta > 0 expected"
                        : "a constant reduction and beta > 0 expected");
  }
  return PiecewiseError(g, n->input(0), n->input(1), reduction, *threshold,
                        huber);
}

// nll_loss / nll_loss_nd (log_probs, target, weight, reduction, ignore_index).
Value* NllLoss(Graph& g, Node* n) {
  const int64_t reduction = ReductionOf(n, 3);
  if (const char* problem = ClassIndexProblem(n, n->input(0), n->input(1)))
    return Reject(problem);
  if (reduction < 0) return Reject("a constant reduction expected");
  return NegativeLogLikelihood(g, n->input(0), n->input(1), reduction);
}

}  // namespace

const RewriteTable& LossRewrites() {
  static const auto* rewrites = new RewriteTable{
      {"aten::mse_loss",  // (a, b, reduction)
       [](Graph& g, Node* n) -> Value* {
         const int64_t reduction = ReductionOf(n, 2);
         if (reduction < 0) return Reject("a constant reduction expected");
         Value* d = InsertOp(g, "aten::sub", {n->input(0), n->input(1)});
         return Reduce(g, InsertOp(g, "aten::mul", {d, d}), reduction);
       }},
      {"aten::l1_loss",  // (a, b, reduction)
       [](Graph& g, Node* n) -> Value* {
         const int64_t reduction = ReductionOf(n, 2);
         if (reduction < 0) return Reject("a constant reduction expected");
         return Reduce(
             g,
             InsertOp(g, "aten::abs",
                      {InsertOp(g, "aten::sub", {n->input(0), n->input(1)})}),
             reduction);
       }},
      {"aten::smooth_l1_loss",  // (a, b, reduction, beta)
       [](Graph& g, Node* n) { return PiecewiseLoss(g, n, false); }},
      {"aten::huber_loss",  // (a, b, reduction, delta)
       [](Graph& g, Node* n) { return PiecewiseLoss(g, n, true); }},
      {"aten::nll_loss", NllLoss},
      {"aten::nll_loss_nd", NllLoss},
      {"aten::cross_entropy_loss",
       // (logits, target, weight, reduction, ignore_index, label_smoothing):
       // class indices, (1 - s) nll + s / C * mean over classes of -log p;
       // probabilities, -sum(target' log p) over classes with target'
       // smoothed toward 1 / C, its mean over the other dims
       [](Graph& g, Node* n) -> Value* {
         Value *logits = n->input(0), *target = n->input(1);
         const int64_t reduction = ReductionOf(n, 3);
         auto smoothing = ConstantNumber(n->input(5));
         auto sizes = StaticSizes(logits);
         if (reduction < 0 || !smoothing || !sizes || sizes->size() < 2) {
           return Reject(
               "an [N, C, *] input of static shape, constant reduction and "
               "label_smoothing expected");
         }
         const double classes = static_cast<double>((*sizes)[1]);
         Value* log_probs = WithTypeOf(LogSoftmax(g, logits, 1), logits);
         Value* one = g.insertConstant(std::vector<int64_t>{1});
         auto target_type = target->type()->cast<c10::TensorType>();
         if (target_type && target_type->scalarType() &&
             c10::isFloatingType(
                 *target_type->scalarType())) {  // probabilities
           if (StaticSizes(target) != sizes)
             return Reject("a target shaped as the input expected");
           if (!IsNone(n->input(2)))
             return Reject("class weights are not compiled");
           Value* weights = target;
           if (*smoothing > 0) {
             weights = InsertOp(
                 g, "aten::add",
                 {InsertOp(g, "aten::mul",
                           {target, g.insertConstant(1.0 - *smoothing)}),
                  g.insertConstant(*smoothing / classes)});
           }
           Value* per_item = InsertOp(
               g, "aten::neg",
               {InsertOp(g, "aten::sum",
                         {InsertOp(g, "aten::mul", {log_probs, weights}), one,
                          g.insertConstant(false)})});
           return Reduce(g, per_item, reduction);
         }
         if (const char* problem = ClassIndexProblem(n, logits, target))
           return Reject(problem);
         Value* nll = NegativeLogLikelihood(g, log_probs, target, reduction);
         if (*smoothing == 0) return nll;
         Value* spread =
             InsertOp(g, "aten::neg",
                      {InsertOp(g, "aten::sum",
                                {log_probs, one, g.insertConstant(false)})});
         return InsertOp(g, "aten::add",
                         {InsertOp(g, "aten::mul",
                                   {nll, g.insertConstant(1.0 - *smoothing)}),
                          InsertOp(g, "aten::mul",
                                   {Reduce(g, spread, reduction),
                                    g.insertConstant(*smoothing / classes)})});
       }},
      {"aten::binary_cross_entropy",
       // Declined with the reason: near saturation (p or 1 - p below 1e-12,
       // p exactly 1 in float32) eager's backward divides by
       // max(p (1 - p), 1e-12) and clamps each log at -100, which is not the
       // derivative of any loss the primitives can write; the compiled
       // gradient would differ there.
       [](Graph&, Node*) -> Value* {
         return Reject(
             "eager's gradient near saturated probabilities is not the loss's "
             "derivative: "
             "not compiled; binary_cross_entropy_with_logits is");
       }},
      {"aten::binary_cross_entropy_with_logits",
       // (x, y, weight, pos_weight, reduction):
       // w ((1 - y) x + (1 + (pos_weight - 1) y) softplus(-x)), smooth in x
       [](Graph& g, Node* n) -> Value* {
         const int64_t reduction = ReductionOf(n, 4);
         const int64_t rank = TensorRank(n->input(0));
         if (reduction < 0 || rank < 0)
           return Reject(
               "an input of known rank and a constant reduction expected");
         Value *x = n->input(0), *y = n->input(1);
         Value* soft = Softplus(g, InsertOp(g, "aten::neg", {x}), rank);
         if (!IsNone(n->input(3))) {
           Value* scale = InsertOp(
               g, "aten::add",
               {InsertOp(g, "aten::mul",
                         {InsertOp(g, "aten::sub",
                                   {n->input(3), g.insertConstant(1.0)}),
                          y}),
                g.insertConstant(1.0)});
           soft = InsertOp(g, "aten::mul", {soft, scale});
         }
         Value* loss = InsertOp(
             g, "aten::add",
             {InsertOp(
                  g, "aten::mul",
                  {InsertOp(g, "aten::rsub", {y, g.insertConstant(1.0)}), x}),
              soft});
         if (!IsNone(n->input(2)))
           loss = InsertOp(g, "aten::mul", {loss, n->input(2)});
         return Reduce(g, loss, reduction);
       }},
      {"aten::kl_div",
       // (x, t, reduction, log_target): t log t - t x (0 where t is 0, as
       // eager's xlogy, gradients included), or exp(t) (t - x) for log
       // targets
       [](Graph& g, Node* n) -> Value* {
         const int64_t reduction = ReductionOf(n, 2);
         auto log_target = ConstantOf(n->input(3));
         if (reduction < 0 || !log_target || !log_target->isBool())
           return Reject("constant reduction and log_target expected");
         Value *x = n->input(0), *t = n->input(1);
         Value* pointwise;
         if (log_target->toBool()) {
           pointwise = InsertOp(g, "aten::mul",
                                {InsertOp(g, "aten::exp", {t}),
                                 InsertOp(g, "aten::sub", {t, x})});
         } else {
           Value* zero = Filled(g, t, 0.0);
           Value* is_zero = InsertOp(g, "aten::eq", {t, zero});
           Value* safe =
               InsertOp(g, "aten::where", {is_zero, Filled(g, t, 1.0), t});
           Value* terms =
               InsertOp(g, "aten::mul",
                        {t, InsertOp(g, "aten::sub",
                                     {InsertOp(g, "aten::log", {safe}), x})});
           pointwise = InsertOp(g, "aten::where", {is_zero, zero, terms});
         }
         return Reduce(g, pointwise, reduction);
       }},
  };
  return *rewrites;
}

}  // namespace metafuse::compiler::decompose_internal
