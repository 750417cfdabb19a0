#include "compiler/autodiff.h"

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
  if (!dim) throw UnsupportedOp(std::string("rank-unknown input of ") + OpName(v->node()));
  return static_cast<int64_t>(*dim);
}

// Re-inserts reduced dims of a keepdim=False reduction so `grad` broadcasts
// against the input again.
Value* Unreduce(Emit& e, Value* grad, Value* input, Value* dims_value, bool keepdim) {
  if (keepdim) return grad;
  auto dims_iv = torch::jit::toIValue(dims_value);
  if (!dims_iv) throw UnsupportedOp("reduction with non-constant dims");
  std::vector<int64_t> dims = dims_iv->toIntVector();
  const int64_t rank = Rank(input);
  for (auto& d : dims) d = d < 0 ? d + rank : d;
  std::sort(dims.begin(), dims.end());
  for (int64_t d : dims) grad = e.op("aten::unsqueeze", {grad, e.ci(d)});
  return grad;
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
         if (IsTensor(n->input(1))) r[1] = e.sum_to(TimesAlpha(e, g, Alpha(n, 2)), n->input(1));
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
         if (IsTensor(n->input(1))) r[1] = e.sum_to(e.mul(g, n->input(0)), n->input(1));
         return r;
       }},
      {"aten::div",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         if (n->inputs().size() != 2) throw UnsupportedOp("aten::div with rounding_mode");
         Value* g = go[0];
         Grads r(2, nullptr);
         r[0] = e.sum_to(e.div(g, n->input(1)), n->input(0));
         if (IsTensor(n->input(1))) {
           // d(a/b)/db = -(a/b)/b
           r[1] = e.sum_to(e.neg(e.div(e.mul(g, n->output()), n->input(1))), n->input(1));
         }
         return r;
       }},
      {"aten::neg", [](Emit& e, Node*, const Grads& go) -> Grads { return {e.neg(go[0])}; }},
      {"aten::exp",
       [](Emit& e, Node* n, const Grads& go) -> Grads { return {e.mul(go[0], n->output())}; }},
      {"aten::log",
       [](Emit& e, Node* n, const Grads& go) -> Grads { return {e.div(go[0], n->input(0))}; }},
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
         Value* mask = e.as_mask(e.op("aten::gt", {n->input(0), e.c(0.0)}), go[0]);
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
         Value* local = c == 2.0 ? e.mul(n->input(0), e.c(2.0))
                                 : e.mul(e.op("aten::pow", {n->input(0), e.c(c - 1.0)}), e.c(c));
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
      {"aten::abs",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         Value* x = n->input(0);
         Value* sign = e.sub(e.as_mask(e.op("aten::gt", {x, e.c(0.0)}), go[0]),
                             e.as_mask(e.op("aten::lt", {x, e.c(0.0)}), go[0]));
         return {e.mul(go[0], sign)};
       }},
      {"aten::where",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         Value* zeros = e.zeros_like(go[0]);
         return {nullptr,
                 e.sum_to(e.op("aten::where", {n->input(0), go[0], zeros}), n->input(1)),
                 e.sum_to(e.op("aten::where", {n->input(0), zeros, go[0]}), n->input(2))};
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
           g = Unreduce(e, g, n->input(0), n->input(1), keepdim && keepdim->toBool());
         }
         r[0] = e.op("aten::type_as", {e.expand_as(g, n->input(0)), n->input(0)});
         return r;
       }},
      {"aten::mean",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         Grads r(n->inputs().size(), nullptr);
         Value* g = go[0];
         if (n->inputs().size() >= 3 &&
             n->input(1)->type()->kind() == c10::TypeKind::ListType) {
           auto keepdim = torch::jit::toIValue(n->input(2));
           g = Unreduce(e, g, n->input(0), n->input(1), keepdim && keepdim->toBool());
         }
         // Each input element contributes 1 / (numel(in) / numel(out)).
         Value* spread = e.expand_as(g, n->input(0));
         r[0] = e.div(e.mul(spread, e.numel(n->output())), e.numel(n->input(0)));
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
         Value* count = e.op("aten::sum", {mask, n->input(1), e.g.insertConstant(true)});
         return {e.mul(e.expand_as(g, n->input(0)), e.div(mask, count)), nullptr, nullptr};
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
      {"aten::t", [](Emit& e, Node*, const Grads& go) -> Grads { return {e.op("aten::t", {go[0]})}; }},
      {"aten::transpose",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         return {e.op("aten::transpose", {go[0], n->input(1), n->input(2)}), nullptr, nullptr};
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
      {"aten::gather",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         Grads r(n->inputs().size(), nullptr);
         r[0] = e.op("aten::scatter_add",
                     {e.zeros_like(n->input(0)), n->input(1), n->input(2), go[0]});
         return r;
       }},
      {"aten::scatter_add",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         return {go[0], nullptr, nullptr,
                 e.op("aten::gather", {go[0], n->input(1), n->input(2)})};
       }},
  };
  return *rules;
}

// Ops whose outputs carry no gradient (masks, shapes, fresh constants).
bool IsNonDifferentiable(const Node* n) {
  static const std::unordered_set<std::string> kOps = {
      "aten::gt", "aten::lt", "aten::ge", "aten::le", "aten::eq",
      "aten::size", "aten::numel", "aten::zeros_like", "aten::ones_like",
      "prim::Constant", "prim::ListConstruct"};
  return kOps.count(OpName(n)) > 0;
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
    if (!depends || IsNonDifferentiable(node)) continue;
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
      if (node->outputs().size() != 1) throw UnsupportedOp(name);
      input_grads = rule->second(e, node, grad_outputs);
    }
    for (size_t i = 0; i < input_grads.size() && i < node->inputs().size(); ++i) {
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
    if (!iv) throw UnsupportedOp("metafuse::adam with non-constant hyperparameters");
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
  if (!decoupled && wd != 0.0 && has_param) g_eff = e.add(g_eff, e.mul(param, e.c(wd)));
  Value* s = e.op("aten::sqrt", {e.add(e.div(nu_new, e.c(bc2)), e.c(eps_root))});
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
