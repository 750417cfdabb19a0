// Derivative rules: elementwise ops (arithmetic, unary functions, where, casts).
#include "compiler/autodiff/derivative_rules.h"

namespace metafuse::compiler::rules {

void AddElementwiseRules(RuleTable& t) {
  t.emplace("aten::add",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         Value* g = go[0];
         Grads r(n->inputs().size(), nullptr);
         r[0] = e.sum_to(g, n->input(0));
         if (IsTensor(n->input(1)))
           r[1] = e.sum_to(TimesAlpha(e, g, Alpha(n, 2)), n->input(1));
         return r;
       });
  t.emplace("aten::sub",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         Value* g = go[0];
         Grads r(n->inputs().size(), nullptr);
         r[0] = e.sum_to(g, n->input(0));
         if (IsTensor(n->input(1))) {
           r[1] = e.sum_to(e.neg(TimesAlpha(e, g, Alpha(n, 2))), n->input(1));
         }
         return r;
       });
  // other - alpha * self
  t.emplace("aten::rsub",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         Value* g = go[0];
         Grads r(n->inputs().size(), nullptr);
         r[0] = e.sum_to(e.neg(TimesAlpha(e, g, Alpha(n, 2))), n->input(0));
         if (IsTensor(n->input(1))) r[1] = e.sum_to(g, n->input(1));
         return r;
       });
  t.emplace("aten::mul",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         Value* g = go[0];
         Grads r(n->inputs().size(), nullptr);
         r[0] = e.sum_to(e.mul(g, n->input(1)), n->input(0));
         if (IsTensor(n->input(1)))
           r[1] = e.sum_to(e.mul(g, n->input(0)), n->input(1));
         return r;
       });
  t.emplace("aten::div",
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
       });
  t.emplace("aten::neg",
       [](Emit& e, Node*, const Grads& go) -> Grads { return {e.neg(go[0])}; });
  t.emplace("aten::exp",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         return {e.mul(go[0], n->output())};
       });
  t.emplace("aten::log",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         return {e.div(go[0], n->input(0))};
       });
  t.emplace("aten::tanh",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         Value* y = n->output();
         return {e.mul(go[0], e.op("aten::rsub", {e.mul(y, y), e.c(1.0)}))};
       });
  t.emplace("aten::sigmoid",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         Value* y = n->output();
         return {e.mul(go[0], e.mul(y, e.op("aten::rsub", {y, e.c(1.0)})))};
       });
  // The mask from the result (relu(x) > 0 exactly when x > 0): the result is
  // kept anyway by whatever consumes it, the input need not be saved.
  t.emplace("aten::relu",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         Value* mask =
             e.as_mask(e.op("aten::gt", {n->output(), e.c(0.0)}), go[0]);
         return {e.mul(go[0], mask)};
       });
  // go / (2 sqrt(x)), and exactly 0 where go and sqrt(x) are both exactly
  // 0: at x = 0 the local derivative is infinite, and 0 * inf would be NaN
  // where the path contributes nothing. Adam's root is such a point: its
  // cotangent carries the first moment, which is exactly 0 when the second
  // moment is (a unit whose gradients were all 0), and the exact
  // meta-gradient is finite. Only there: where sqrt(x) > 0 the quotient is
  // left alone, so its derivative in go stays 1 / (2 sqrt(x)) even where go
  // happens to be 0 (a higher-order derivative differentiates it in go).
  // |go| + sqrt(x) == 0 exactly when both are 0 (sqrt(x) >= 0).
  t.emplace("aten::sqrt",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         Value* quotient = e.div(go[0], e.mul(n->output(), e.c(2.0)));
         Value* both_zero = e.op(
             "aten::eq", {e.add(e.op("aten::abs", {go[0]}), n->output()), e.c(0.0)});
         return {e.op("aten::where", {both_zero, e.zeros_like(quotient), quotient})};
       });
  t.emplace("aten::pow",
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
       });
  t.emplace("aten::sin",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         return {e.mul(go[0], e.op("aten::cos", {n->input(0)}))};
       });
  t.emplace("aten::cos",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         return {e.neg(e.mul(go[0], e.op("aten::sin", {n->input(0)})))};
       });
  // 2 / sqrt(pi) exp(-x^2)
  t.emplace("aten::erf",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         Value* x = n->input(0);
         Value* bell = e.op("aten::exp", {e.neg(e.mul(x, x))});
         return {e.mul(go[0], e.mul(bell, e.c(M_2_SQRTPI)))};
       });
  // 1 / (1 + x), eager's log1p backward
  t.emplace("aten::log1p",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         return {e.div(go[0], e.add(n->input(0), e.c(1.0)))};
       });
  // expm1(x) + 1 from the result, as eager's expm1 backward
  t.emplace("aten::expm1",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         return {e.mul(go[0], e.add(n->output(), e.c(1.0)))};
       });
  t.emplace("aten::abs",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         Value* x = n->input(0);
         Value* sign = e.sub(e.as_mask(e.op("aten::gt", {x, e.c(0.0)}), go[0]),
                             e.as_mask(e.op("aten::lt", {x, e.c(0.0)}), go[0]));
         return {e.mul(go[0], sign)};
       });
  t.emplace("aten::where",
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
       });
  t.emplace("aten::type_as",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         return {e.op("aten::type_as", {go[0], n->input(0)}), nullptr};
       });
  t.emplace("aten::clone",
       [](Emit&, Node* n, const Grads& go) -> Grads {
         Grads r(n->inputs().size(), nullptr);
         r[0] = go[0];
         return r;
       });
  t.emplace("aten::contiguous",
       [](Emit&, Node* n, const Grads& go) -> Grads {
         Grads r(n->inputs().size(), nullptr);
         r[0] = go[0];
         return r;
       });
}

}  // namespace metafuse::compiler::rules
