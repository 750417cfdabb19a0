// Derivative rules: fused optimizer updates (metafuse::adam).
#include "compiler/derivative_rules.h"

namespace metafuse::compiler::rules {
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

void AddOptimizerRules(RuleTable& t) { t.emplace("metafuse::adam", AdamRule); }

}  // namespace metafuse::compiler::rules
