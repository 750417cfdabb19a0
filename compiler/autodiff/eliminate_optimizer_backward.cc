#include "compiler/autodiff/eliminate_optimizer_backward.h"
#include "compiler/ir/ir_helpers.h"

#include "runtime/base/options.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/jit/ir/constants.h>

namespace metafuse::compiler {
namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Symbol;
using torch::jit::Value;

const Symbol kAdd = Symbol::fromQualString("aten::add");
const Symbol kMul = Symbol::fromQualString("aten::mul");
const Symbol kDiv = Symbol::fromQualString("aten::div");
const Symbol kNeg = Symbol::fromQualString("aten::neg");
const Symbol kSqrt = Symbol::fromQualString("aten::sqrt");
const Symbol kAdam = Symbol::fromQualString("metafuse::adam");


bool OneUse(Value* v) { return v->uses().size() == 1; }

// The node that produced `v` when it is `kind` with `num_inputs` inputs.
Node* Producer(Value* v, Symbol kind, size_t num_inputs) {
  Node* n = v->node();
  return n->kind() == kind && n->inputs().size() == num_inputs ? n : nullptr;
}

// The only user of `v`, when it has one use and that user one output.
Node* SoleUser(Value* v) {
  if (!OneUse(v)) return nullptr;
  Node* user = v->uses()[0].user;
  return user->outputs().size() == 1 ? user : nullptr;
}

// v = op(x, c): a tensor times/divided by a constant number.
struct ScalarOp {
  Node* node = nullptr;
  Value* x = nullptr;
  double c = 0.0;
};

std::optional<ScalarOp> ByNumber(Value* v, Symbol kind) {
  Node* n = Producer(v, kind, 2);
  if (n == nullptr || !IsTensor(n->input(0))) return std::nullopt;
  auto c = ConstantNumber(n->input(1));
  if (!c) return std::nullopt;
  return ScalarOp{n, n->input(0), *c};
}

// v = add(x, c, alpha=1): a tensor plus a constant number.
std::optional<ScalarOp> PlusNumber(Value* v) {
  Node* n = Producer(v, kAdd, 3);
  if (n == nullptr || !IsTensor(n->input(0))) return std::nullopt;
  auto c = ConstantNumber(n->input(1));
  auto alpha = ConstantNumber(n->input(2));
  if (!c || !alpha || *alpha != 1.0) return std::nullopt;
  return ScalarOp{n, n->input(0), *c};
}

// v = add(a, b, alpha) of two tensors with a constant alpha: a + alpha b.
struct AddOp {
  Node* node = nullptr;
  Value *a = nullptr, *b = nullptr;
  double alpha = 1.0;
};

std::optional<AddOp> AddTensors(Value* v) {
  Node* n = Producer(v, kAdd, 3);
  if (n == nullptr || !IsTensor(n->input(0)) || !IsTensor(n->input(1)))
    return std::nullopt;
  auto alpha = ConstantNumber(n->input(2));
  if (!alpha) return std::nullopt;
  return AddOp{n, n->input(0), n->input(1), *alpha};
}

// g * -1 or -g.
Value* Negated(Value* v) {
  if (auto m = ByNumber(v, kMul); m && m->c == -1.0) return m->x;
  if (Node* n = Producer(v, kNeg, 1)) return n->input(0);
  return nullptr;
}

// The step count t with 1 - b1^t == bc1 and 1 - b2^t == bc2 exactly (the
// frontend computes both with std::pow on the host, as the kernel does).
std::optional<int64_t> StepCount(double b1, double bc1, double b2, double bc2) {
  const double rest = 1.0 - bc2;  // b2^t
  if (!(rest > 0.0 && rest < 1.0)) return std::nullopt;
  const double estimate = std::log(rest) / std::log(b2);
  if (!std::isfinite(estimate) || estimate > 1e9) return std::nullopt;
  const int64_t center = std::llround(estimate);
  for (int64_t t = std::max<int64_t>(1, center - 2); t <= center + 2; ++t) {
    const double dt = static_cast<double>(t);
    if (1.0 - std::pow(b2, dt) == bc2 && 1.0 - std::pow(b1, dt) == bc1) return t;
  }
  return std::nullopt;
}

// Whether metafuse::adam has a kernel for `device`: the CPU always; CUDA
// where the kernels library registered its CUDA form (a CUDA torch build).
bool AdamKernelRunsOn(c10::Device device) {
  if (device.is_cpu()) return true;
  if (!device.is_cuda()) return false;
  auto op = c10::Dispatcher::singleton().findOp({"metafuse::adam", ""});
  return op.has_value() && op->hasKernelForDispatchKey(c10::DispatchKey::CUDA);
}

// Every value: a float/double tensor with the same known sizes on one
// device metafuse::adam runs on (the kernel checks exactly this and does not
// broadcast).
bool SameShapeFloatingOnKernelDevice(const std::vector<Value*>& values) {
  c10::optional<std::vector<int64_t>> sizes;
  c10::optional<c10::ScalarType> dtype;
  c10::optional<c10::Device> on;
  for (Value* v : values) {
    auto t = v->type()->cast<c10::TensorType>();
    if (!t) return false;
    auto s = t->sizes().concrete_sizes();
    auto st = t->scalarType();
    auto device = t->device();
    if (!s || !st || !device || !AdamKernelRunsOn(*device)) return false;
    if (*st != c10::kFloat && *st != c10::kDouble) return false;
    if (sizes && (*s != *sizes || *st != *dtype || *device != *on)) return false;
    sizes = s;
    dtype = st;
    on = device;
  }
  return true;
}

// One matched update chain.
struct Chain {
  Value *grad = nullptr, *mu = nullptr, *nu = nullptr, *param = nullptr;
  Value *mu_new = nullptr, *nu_new = nullptr, *update = nullptr;
  int64_t count = 0;
  double lr = 0, b1 = 0, b2 = 0, eps = 0, eps_root = 0, weight_decay = 0;
  bool decoupled = false, maximize = false;
  std::vector<Node*> nodes;  // removed by the rewrite
};

// The chain around `sqrt_node` (see the header), or nothing.
std::optional<Chain> MatchAdam(Node* sqrt_node) {
  Chain c;
  // The second moment: sqrt(add(div(nu', bc2), eps_root)).
  Value* under_root = sqrt_node->input(0);
  if (!OneUse(under_root)) return std::nullopt;
  Value* nu_hat = under_root;
  if (auto root_eps = PlusNumber(under_root)) {
    c.eps_root = root_eps->c;
    nu_hat = root_eps->x;
    c.nodes.push_back(root_eps->node);
    if (!OneUse(nu_hat)) return std::nullopt;
  }
  auto bc2 = ByNumber(nu_hat, kDiv);
  if (!bc2) return std::nullopt;
  c.nu_new = bc2->x;
  auto nu_sum = AddTensors(c.nu_new);
  if (!nu_sum || nu_sum->alpha != 1.0 || !OneUse(nu_sum->a) || !OneUse(nu_sum->b))
    return std::nullopt;
  auto nu_decay = ByNumber(nu_sum->a, kMul);
  auto square_scaled = ByNumber(nu_sum->b, kMul);
  if (!nu_decay || !square_scaled || !OneUse(square_scaled->x)) return std::nullopt;
  Node* square = Producer(square_scaled->x, kMul, 2);
  if (square == nullptr || square->input(0) != square->input(1)) return std::nullopt;
  Value* g_eff = square->input(0);
  c.nu = nu_decay->x;
  c.b2 = nu_decay->c;
  if (square_scaled->c != 1.0 - c.b2) return std::nullopt;

  // The denominator and the first moment: div(div(mu', bc1), add(s, eps)).
  Node* plus_eps = SoleUser(sqrt_node->output());
  if (plus_eps == nullptr) return std::nullopt;
  auto eps = PlusNumber(plus_eps->output());
  if (!eps || eps->x != sqrt_node->output()) return std::nullopt;
  c.eps = eps->c;
  Node* ratio = SoleUser(plus_eps->output());
  if (ratio == nullptr || ratio->kind() != kDiv || ratio->inputs().size() != 2 ||
      ratio->input(1) != plus_eps->output() || !OneUse(ratio->input(0)))
    return std::nullopt;
  auto bc1 = ByNumber(ratio->input(0), kDiv);
  if (!bc1) return std::nullopt;
  c.mu_new = bc1->x;
  auto mu_sum = AddTensors(c.mu_new);
  if (!mu_sum || mu_sum->b != g_eff || !OneUse(mu_sum->a)) return std::nullopt;
  auto mu_decay = ByNumber(mu_sum->a, kMul);
  if (!mu_decay) return std::nullopt;
  c.mu = mu_decay->x;
  c.b1 = mu_decay->c;
  if (mu_sum->alpha != 1.0 - c.b1) return std::nullopt;

  // After the ratio: [add(u, p, alpha=wd)] (decoupled decay), then * -lr.
  Value* u = ratio->output();
  Node* next = SoleUser(u);
  if (next == nullptr) return std::nullopt;
  if (auto decay = AddTensors(next->output());
      decay && decay->a == u && decay->b != u && decay->alpha != 0.0) {
    c.decoupled = true;
    c.param = decay->b;
    c.weight_decay = decay->alpha;
    c.nodes.push_back(decay->node);
    u = next->output();
    next = SoleUser(u);
    if (next == nullptr) return std::nullopt;
  }
  auto scaled = ByNumber(next->output(), kMul);
  if (!scaled || scaled->x != u || !std::isfinite(scaled->c)) return std::nullopt;
  c.lr = -scaled->c;
  c.update = next->output();

  for (Node* n : {bc2->node, nu_sum->node, nu_decay->node, square_scaled->node,
                  square, sqrt_node, plus_eps, ratio, bc1->node, mu_sum->node,
                  mu_decay->node, scaled->node}) {
    c.nodes.push_back(n);
  }

  // Before the moments: g' = [add(]g[ * -1][, p, alpha=wd)], absorbed when g'
  // is read by the two moments only (three uses: the EMA and g' * g').
  c.grad = g_eff;
  bool only_moments = g_eff->uses().size() == 3;
  for (const auto& use : g_eff->uses()) {
    only_moments = only_moments && (use.user == mu_sum->node || use.user == square);
  }
  if (only_moments) {
    Value* g = g_eff;
    if (auto decay = AddTensors(g); !c.decoupled && decay && decay->a != decay->b &&
                                    decay->alpha != 0.0) {
      c.param = decay->b;
      c.weight_decay = decay->alpha;
      c.nodes.push_back(decay->node);
      g = decay->a;
    }
    if (Value* flipped = (g == g_eff || OneUse(g)) ? Negated(g) : nullptr) {
      c.maximize = true;
      c.nodes.push_back(g->node());
      g = flipped;
    }
    c.grad = g;
  }

  for (Node* n : c.nodes) {
    if (n->owningBlock() != sqrt_node->owningBlock()) return std::nullopt;
  }
  // Constants the node can take (the kernel's own checks), and shapes.
  if (!(c.b1 >= 0.0 && c.b1 < 1.0 && c.b2 > 0.0 && c.b2 < 1.0 && c.eps >= 0.0 &&
        c.eps_root >= 0.0 && std::isfinite(c.weight_decay)))
    return std::nullopt;
  auto count = StepCount(c.b1, bc1->c, c.b2, bc2->c);
  if (!count) return std::nullopt;
  c.count = *count;
  std::vector<Value*> tensors = {c.grad, c.mu, c.nu, c.mu_new, c.nu_new, c.update};
  if (c.param != nullptr) tensors.push_back(c.param);
  if (!SameShapeFloatingOnKernelDevice(tensors)) return std::nullopt;
  return c;
}

// The top-level node of `graph` that holds `n` (itself, or the node whose
// block contains it).
Node* TopLevel(Node* n, const Graph& graph) {
  while (n->owningBlock() != graph.block()) n = n->owningBlock()->owningNode();
  return n;
}

// Replaces the chain by one metafuse::adam node; false (nothing changed)
// when no position in the graph can hold it.
bool Rewrite(Graph& graph, const Chain& c) {
  // After every input's definition and the two moment sums...
  Node* mu_sum = c.mu_new->node();
  Node* nu_sum = c.nu_new->node();
  Node* position = mu_sum->isBefore(nu_sum) ? nu_sum : mu_sum;
  for (Value* in : {c.grad, c.mu, c.nu, c.param}) {
    if (in == nullptr || in->node()->kind() == torch::jit::prim::Param) continue;
    Node* def = TopLevel(in->node(), graph);
    if (!def->isBefore(position)) position = def->next();
  }
  // ...and before every user of the results outside the chain.
  for (Value* out : {c.mu_new, c.nu_new, c.update}) {
    for (const auto& use : out->uses()) {
      if (std::find(c.nodes.begin(), c.nodes.end(), use.user) != c.nodes.end())
        continue;
      Node* user = TopLevel(use.user, graph);
      if (user != position && !position->isBefore(user)) return false;
    }
  }
  torch::jit::WithInsertPoint guard(position);
  Value* param = c.param != nullptr ? c.param : graph.insertConstant(c10::IValue());
  Node* adam = graph.create(
      kAdam,
      {c.grad, c.mu, c.nu, param, graph.insertConstant(c.count),
       graph.insertConstant(c.lr), graph.insertConstant(c.b1),
       graph.insertConstant(c.b2), graph.insertConstant(c.eps),
       graph.insertConstant(c.eps_root), graph.insertConstant(c.weight_decay),
       graph.insertConstant(c.decoupled), graph.insertConstant(c.maximize)},
      3);
  graph.insertNode(adam);
  TORCH_CHECK(adam->maybeSchema() != nullptr,
              "metafuse::adam is not registered: is the kernels library linked?");
  const Value* results[] = {c.update, c.mu_new, c.nu_new};
  for (size_t i = 0; i < 3; ++i) adam->output(i)->setType(results[i]->type());
  c.update->replaceAllUsesWith(adam->output(0));
  c.mu_new->replaceAllUsesWith(adam->output(1));
  c.nu_new->replaceAllUsesWith(adam->output(2));
  std::vector<Node*> dead = c.nodes;
  std::sort(dead.begin(), dead.end(), [](Node* a, Node* b) { return b->isBefore(a); });
  for (Node* n : dead) {
    TORCH_INTERNAL_ASSERT(!n->hasUses(), "optimizer elimination: a chain node ",
                          n->kind().toQualString(), " is still used");
    n->destroy();
  }
  return true;
}

bool Disabled() { return !runtime::OptionsFromEnvironment().optimizer_elimination; }

}  // namespace

OptimizerEliminationStats EliminateOptimizerBackward(
    const std::shared_ptr<Graph>& graph) {
  OptimizerEliminationStats stats;
  std::vector<Node*> roots;
  for (Node* n : graph->nodes()) {
    if (n->kind() == kSqrt && n->inputs().size() == 1) roots.push_back(n);
  }
  // Each chain holds exactly one of the square roots and destroys only its
  // own nodes, so the later roots stay valid.
  for (Node* root : roots) {
    auto chain = MatchAdam(root);
    if (!chain || !Rewrite(*graph, *chain)) continue;
    ++(chain->decoupled ? stats.adamw : stats.adam);
  }
  return stats;
}

OptimizerEliminationStats EliminateOptimizerBackwardStage(
    const std::shared_ptr<Graph>& graph, StageLog* log) {
  if (Disabled()) return {};
  OptimizerEliminationStats stats = EliminateOptimizerBackward(graph);
  if (log != nullptr && stats.total() > 0) {
    log->Record("optimizer backward eliminated", *graph);
  }
  return stats;
}

}  // namespace metafuse::compiler
