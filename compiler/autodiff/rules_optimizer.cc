// Derivative rules: fused optimizer updates (metafuse::adam).
//
// The closed form is not written here: it is kernels/optim_math.h's
// AdamBackwardElement, the one the fused kernels and their ATen backward
// instantiate, instantiated once more with a symbolic value type whose
// arithmetic emits primitive IR.
#include "compiler/autodiff/derivative_rules.h"
#include "kernels/optim_math.h"

namespace metafuse::compiler::rules {
namespace {

// A value of the emitted program, or a known zero (v == nullptr): the
// closed form multiplies by coefficients that are 0 or 1 for most options
// (no weight decay, no maximize), which fold away instead of becoming nodes.
struct Symbolic {
  Emit* e = nullptr;
  Value* v = nullptr;
  bool zero() const { return v == nullptr; }
};

Symbolic Make(const Symbolic& like, Value* v) { return Symbolic{like.e, v}; }

Symbolic operator+(const Symbolic& a, const Symbolic& b) {
  if (a.zero()) return b;
  if (b.zero()) return a;
  return Make(a, a.e->add(a.v, b.v));
}
Symbolic operator-(const Symbolic& a, const Symbolic& b) {
  if (b.zero()) return a;
  if (a.zero()) return Make(b, b.e->neg(b.v));
  return Make(a, a.e->sub(a.v, b.v));
}
Symbolic operator*(const Symbolic& a, const Symbolic& b) {
  if (a.zero() || b.zero()) return Symbolic{a.e ? a.e : b.e, nullptr};
  return Make(a, a.e->mul(a.v, b.v));
}
Symbolic operator/(const Symbolic& a, const Symbolic& b) {
  if (b.zero()) throw UnsupportedOp("metafuse::adam (a symbolic division by zero)");
  if (a.zero()) return a;
  return Make(a, a.e->div(a.v, b.v));
}
Symbolic operator*(const Symbolic& a, double c) {
  if (a.zero() || c == 0.0) return Symbolic{a.e, nullptr};
  if (c == 1.0) return a;
  return Make(a, a.e->mul(a.v, a.e->c(c)));
}
Symbolic operator*(double c, const Symbolic& a) { return a * c; }
Symbolic operator+(const Symbolic& a, double c) {
  if (c == 0.0) return a;
  if (a.zero()) throw UnsupportedOp("metafuse::adam (a constant where a tensor was expected)");
  return Make(a, a.e->add(a.v, a.e->c(c)));
}

}  // namespace
}  // namespace metafuse::compiler::rules

// RootInverse (kernels/optim_math.h) emitted as IR, mask / (r + (1 - mask))
// with mask = (r != 0): exactly 1 / r where r > 0, 0 where r == 0; primitive
// elementwise ops only, so it fuses with the rest of the closed form.
namespace metafuse::kernels {
template <>
struct RootInverse<compiler::rules::Symbolic> {
  static compiler::rules::Symbolic Of(const compiler::rules::Symbolic& r) {
    using compiler::rules::Emit;
    using compiler::rules::Value;
    if (r.zero()) {
      throw compiler::UnsupportedOp(
          "metafuse::adam (the inverse of a root that is symbolically zero)");
    }
    Emit& e = *r.e;
    Value* mask = e.as_mask(e.op("aten::ne", {r.v, e.c(0.0)}), r.v);
    Value* safe = e.add(r.v, e.op("aten::rsub", {mask, e.c(1.0)}));
    return {r.e, e.div(mask, safe)};
  }
};
}  // namespace metafuse::kernels

namespace metafuse::compiler::rules {
namespace {

// metafuse::adam(grad, mu, nu, param?, *, count, lr, b1, b2, eps, eps_root,
// weight_decay, decoupled_weight_decay, maximize) -> (update, mu', nu').
// The root r = sqrt(nu' / bc2 + eps_root) is recomputed from nu' (the node
// does not output it); everything else is the shared closed form.
Grads AdamRule(Emit& e, Node* n, const Grads& go) {
  auto constant = [&](const char* name) {
    auto iv = torch::jit::toIValue(n->namedInput(Symbol::attr(name)));
    if (!iv) throw UnsupportedOp("metafuse::adam with non-constant hyperparameters");
    return *iv;
  };
  const kernels::AdamCoeffs<double> c = kernels::MakeAdamCoeffs<double>(
      constant("count").toInt(), constant("lr").toDouble(), constant("b1").toDouble(),
      constant("b2").toDouble(), constant("eps").toDouble(), constant("eps_root").toDouble(),
      constant("weight_decay").toDouble(), constant("decoupled_weight_decay").toBool(),
      constant("maximize").toBool());
  Value* param = n->input(3);
  const bool has_param = param->type()->kind() != c10::TypeKind::NoneType;
  const Symbolic zero{&e, nullptr};
  auto symbolic = [&](Value* v) { return Symbolic{&e, v}; };
  const Symbolic mu_new = symbolic(n->output(1));
  const Symbolic nu_new = symbolic(n->output(2));
  const Symbolic root =
      symbolic(e.op("aten::sqrt", {(nu_new * c.inv_bc2 + c.eps_root).v}));
  auto cotangent = [&](size_t i) { return go[i] ? symbolic(go[i]) : zero; };
  Symbolic grad_g, grad_p, grad_mu, grad_nu;
  kernels::AdamBackwardElement<Symbolic, double>(
      c, symbolic(n->input(0)), has_param ? symbolic(param) : zero, mu_new, root,
      cotangent(0), cotangent(1), cotangent(2), &grad_g, &grad_p, &grad_mu, &grad_nu);
  Grads r(n->inputs().size(), nullptr);
  r[0] = grad_g.v;
  r[1] = grad_mu.v;
  r[2] = grad_nu.v;
  if (has_param) r[3] = grad_p.v;
  return r;
}

}  // namespace

void AddOptimizerRules(RuleTable& t) { t.emplace("metafuse::adam", AdamRule); }

}  // namespace metafuse::compiler::rules
