#include "compiler/lowering/plan_buffers.h"

#include <unordered_map>

#include "compiler/fusion/fusion_group.h"
#include "compiler/lowering/lower_fusion_group.h"
#include "compiler/ir/shape_facts.h"

namespace metafuse::compiler {

using torch::jit::Node;
using torch::jit::Value;

namespace {

// True when `node` is the last reader of v: every other reader comes before
// it in the same block (a BatchNorm's centering kernel after the mean of
// the same conv output may overwrite it). A reader after it, in another
// block (a loop body reads again) or the graph's return keeps v alive.
bool DiesAt(const Value* v, const Node* node) {
  for (const torch::jit::Use& use : v->uses()) {
    if (use.user == node) continue;
    if (use.user->owningBlock() != node->owningBlock() || !use.user->isBefore(node)) return false;
  }
  return true;
}

// Per subgraph input: whether every output of the lowered kernel reads it.
// Taken from the kernel IR itself: zeros_like reads nothing, type_as only
// its first operand, whatever the subgraph's edges say.
std::vector<bool> ReadByEveryOutput(const Node* group) {
  const size_t n = group->g(torch::jit::attr::Subgraph)->inputs().size();
  auto plan = LowerFusionGroup(group);
  if (!plan.ok()) return std::vector<bool>(n, false);
  const codegen::kir::Kernel& k = plan->kernel;
  std::vector<std::vector<bool>> reads(k.nodes.size(), std::vector<bool>(k.inputs.size(), false));
  for (size_t id = 0; id < k.nodes.size(); ++id) {  // arguments precede their users
    const codegen::kir::Node& node = k.nodes[id];
    if (node.op == codegen::kir::Op::kInput) reads[id][node.index] = true;
    for (int a : node.args) {
      for (size_t i = 0; i < k.inputs.size(); ++i) reads[id][i] = reads[id][i] || reads[a][i];
    }
  }
  std::vector<bool> all(n, false);
  for (size_t i = 0; i < n; ++i) {
    if (!plan->is_tensor[i]) continue;
    bool every = true;
    for (const auto& out : k.outputs) every = every && reads[out.node][plan->binding[i]];
    all[i] = every;
  }
  return all;
}

}  // namespace

int64_t PlanBuffers(const std::shared_ptr<torch::jit::Graph>& graph) {
  int64_t planned = 0;
  for (Node* node : graph->nodes()) {
    // A pooled group's output is never materialized (fuse_pool_epilogue.h).
    if (node->kind() != FusionGroupKind() || node->hasAttribute(PoolAttr())) continue;
    const auto& sub = node->g(torch::jit::attr::Subgraph);
    const size_t nin = sub->inputs().size(), nout = sub->outputs().size();
    const int64_t segments = node->hasAttribute(SegmentsAttr()) ? node->i(SegmentsAttr()) : 1;
    std::unordered_map<const Value*, int> occurrences;
    for (const Value* in : node->inputs()) ++occurrences[in];
    std::vector<int64_t> reuse(node->outputs().size(), -1);
    const std::vector<bool> read_by_all = ReadByEveryOutput(node);
    // Scratch outputs (fusion_group.h) are never whole tensors: nothing to reuse.
    const size_t scratch = node->hasAttribute(ScratchAttr()) ? node->i(ScratchAttr()) : 0;
    for (int64_t s = 0; s < segments; ++s) {
      std::vector<bool> claimed(nin, false);
      for (size_t o = 0; o + scratch < nout; ++o) {
        auto out = CompleteTensorType(node->output(s * nout + o));
        if (!out) continue;
        for (size_t i = 0; i < nin; ++i) {
          const Value* in = node->input(s * nin + i);
          auto t = CompleteTensorType(in);
          if (claimed[i] || !read_by_all[i] || !t || occurrences[in] != 1 ||
              !DiesAt(in, node)) {
            continue;
          }
          if (*t->sizes().concrete_sizes() != *out->sizes().concrete_sizes() ||
              t->scalarType() != out->scalarType()) {
            continue;
          }
          claimed[i] = true;
          reuse[s * nout + o] = static_cast<int64_t>(s * nin + i);
          ++planned;
          break;
        }
      }
    }
    node->is_(ReuseAttr(), reuse);
  }
  return planned;
}

}  // namespace metafuse::compiler
