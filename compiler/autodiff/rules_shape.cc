// Derivative rules: shape ops (views, reshapes, transposes, padding, sum_to_size).
#include "compiler/autodiff/derivative_rules.h"

namespace metafuse::compiler::rules {

void AddShapeRules(RuleTable& t) {
  t.emplace("aten::reshape",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         return {e.op("aten::reshape", {go[0], e.size(n->input(0))}), nullptr};
       });
  t.emplace("aten::expand",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         Grads r(n->inputs().size(), nullptr);
         r[0] = e.sum_to(go[0], n->input(0));
         return r;
       });
  t.emplace("aten::sum_to_size",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         return {e.expand_as(go[0], n->input(0)), nullptr};
       });
  t.emplace("aten::t",
       [](Emit& e, Node*, const Grads& go) -> Grads {
         return {e.op("aten::t", {go[0]})};
       });
  t.emplace("aten::transpose",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         return {e.op("aten::transpose", {go[0], n->input(1), n->input(2)}),
                 nullptr, nullptr};
       });
  t.emplace("aten::unsqueeze",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         return {e.op("aten::reshape", {go[0], e.size(n->input(0))}), nullptr};
       });
  t.emplace("aten::squeeze",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         Grads r(n->inputs().size(), nullptr);
         r[0] = e.op("aten::reshape", {go[0], e.size(n->input(0))});
         return r;
       });
  t.emplace("aten::flatten",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         Grads r(n->inputs().size(), nullptr);
         r[0] = e.op("aten::reshape", {go[0], e.size(n->input(0))});
         return r;
       });
  t.emplace("aten::permute",
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
       });
  // crop by the negated pads
  t.emplace("aten::constant_pad_nd",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         Grads r(n->inputs().size(), nullptr);
         r[0] = e.op("aten::constant_pad_nd",
                     {go[0], NegatedIntList(e, n->input(1)), e.c(0.0)});
         return r;
       });
}

}  // namespace metafuse::compiler::rules
