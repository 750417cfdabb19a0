// Derivative rules: reductions (sum, mean, logsumexp, amax).
#include "compiler/autodiff/derivative_rules.h"

namespace metafuse::compiler::rules {

void AddReductionRules(RuleTable& t) {
  t.emplace("aten::sum",
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
       });
  t.emplace("aten::mean",
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
       });
  t.emplace("aten::logsumexp",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         auto keepdim = torch::jit::toIValue(n->input(2));
         const bool kd = keepdim && keepdim->toBool();
         Value* g = Unreduce(e, go[0], n->input(0), n->input(1), kd);
         Value* out = Unreduce(e, n->output(), n->input(0), n->input(1), kd);
         Value* softmax = e.op("aten::exp", {e.sub(n->input(0), out)});
         return {e.mul(e.expand_as(g, n->input(0)), softmax), nullptr, nullptr};
       });
  t.emplace("aten::amax",
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
       });
}

}  // namespace metafuse::compiler::rules
