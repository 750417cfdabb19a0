// Derivative rules: matrix products, convolutions, pooling and indexing.
#include "compiler/autodiff/derivative_rules.h"

namespace metafuse::compiler::rules {

void AddLinalgConvPoolRules(RuleTable& t) {
  t.emplace("aten::mm",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         Value* g = go[0];
         return {e.op("aten::mm", {g, e.op("aten::t", {n->input(1)})}),
                 e.op("aten::mm", {e.op("aten::t", {n->input(0)}), g})};
       });
  // [tasks, n, k] x [tasks, k, m]: the per-task products of metafuse.vmap.
  t.emplace("aten::bmm",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         Value* g = go[0];
         auto swap = [&](Value* v) {
           return e.op("aten::transpose", {v, e.ci(1), e.ci(2)});
         };
         return {e.op("aten::bmm", {g, swap(n->input(1))}),
                 e.op("aten::bmm", {swap(n->input(0)), g})};
       });
  // (x, w, b, stride, padding, dilation, groups)
  t.emplace("aten::conv2d",
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
       });
  // (u, w, b, stride, padding, output_padding,
  t.emplace("aten::conv_transpose2d",
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
       });
  // outputs (values, indices)
  t.emplace("aten::max_pool2d_with_indices",
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
       });
  t.emplace("aten::gather",
       [](Emit& e, Node* n, const Grads& go) -> Grads {
         Grads r(n->inputs().size(), nullptr);
         r[0] = e.op("aten::scatter_add", {e.zeros_like(n->input(0)),
                                           n->input(1), n->input(2), go[0]});
         return r;
       });
  // (self, dim, index, src)
  t.emplace("aten::scatter_add",
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
       });
}

}  // namespace metafuse::compiler::rules
