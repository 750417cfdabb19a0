#include "compiler/fusion/fuse_pool_epilogue.h"

#include <optional>
#include <vector>

#include "compiler/fusion/fusion_group.h"
#include "compiler/ir/ir_helpers.h"
#include "compiler/ir/shape_facts.h"

namespace metafuse::compiler {

using torch::jit::Node;
using torch::jit::Value;

namespace {

// A constant int list of one or two entries as (h, w); an empty one gives
// `fallback` (max_pool2d's stride defaults to the kernel).
std::optional<std::pair<int64_t, int64_t>> PairOf(
    const Value* v, std::optional<std::pair<int64_t, int64_t>> fallback) {
  const std::optional<std::vector<int64_t>> xs = ConstantIntList(v);
  if (!xs || xs->size() > 2) return std::nullopt;
  if (xs->empty()) return fallback;
  return std::make_pair((*xs)[0], xs->back());
}

// {kh, kw} of a max_pool2d_with_indices the plane kernels compute, or none.
std::optional<std::pair<int64_t, int64_t>> PlaneWindow(const Node* pool) {
  if (pool->inputs().size() != 6) return std::nullopt;
  const auto kernel = PairOf(pool->input(1), std::nullopt);
  if (!kernel || kernel->first < 1 || kernel->second < 1) return std::nullopt;
  const auto stride = PairOf(pool->input(2), kernel);
  const auto padding = PairOf(pool->input(3), std::make_pair(int64_t{0}, int64_t{0}));
  const auto dilation = PairOf(pool->input(4), std::make_pair(int64_t{1}, int64_t{1}));
  auto ceil = torch::jit::toIValue(pool->input(5));
  if (stride != kernel || !padding || padding->first != 0 || padding->second != 0 ||
      !dilation || dilation->first != 1 || dilation->second != 1 || !ceil || !ceil->isBool() ||
      ceil->toBool()) {
    return std::nullopt;
  }
  return kernel;
}

}  // namespace

int64_t FusePoolEpilogues(const std::shared_ptr<torch::jit::Graph>& graph) {
  int64_t fused = 0;
  for (auto it = graph->nodes().begin(); it != graph->nodes().end();) {
    Node* pool = *it;
    ++it;
    if (pool->kind() != torch::jit::aten::max_pool2d_with_indices) continue;
    Value* x = pool->input(0);
    Node* group = x->node();
    const auto window = PlaneWindow(pool);
    auto type = CompleteTensorType(x);
    if (!window || group->kind() != FusionGroupKind() || group->outputs().size() != 1 ||
        x->uses().size() != 1 || group->hasAttribute(SegmentsAttr()) ||
        group->hasAttribute(ReduceAttr()) || group->hasAttribute(PoolAttr()) || !type ||
        !type->device() || !type->device()->is_cpu() ||
        (type->scalarType() != at::kFloat && type->scalarType() != at::kDouble)) {
      continue;
    }
    const std::vector<int64_t> sizes = *type->sizes().concrete_sizes();
    if ((sizes.size() != 3 && sizes.size() != 4) || sizes.end()[-2] < window->first ||
        sizes.end()[-1] < window->second) {
      continue;
    }
    group->is_(PoolAttr(), {window->first, window->second});
    for (Value* out : pool->outputs()) {
      Value* taken = group->addOutput();
      taken->copyMetadata(out);
      out->replaceAllUsesWith(taken);
    }
    pool->destroy();
    ++fused;
  }
  return fused;
}

}  // namespace metafuse::compiler
