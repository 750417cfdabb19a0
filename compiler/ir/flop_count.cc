#include "compiler/ir/flop_count.h"

#include <unordered_map>
#include <unordered_set>

#include <ATen/ATen.h>
#include <torch/csrc/jit/ir/constants.h>

#include "compiler/lowering/lower_to_program.h"

namespace metafuse::compiler {
namespace {

// Size of the tensor value `v` had in the run (0 when unknown).
using Sizes = std::unordered_map<const torch::jit::Value*, std::vector<int64_t>>;
int64_t Numel(const Sizes& sizes, const torch::jit::Value* v) {
  auto it = sizes.find(v);
  if (it == sizes.end()) return 0;
  int64_t n = 1;
  for (int64_t d : it->second) n *= d;
  return n;
}

// Flop estimate of one node from the sizes of its values: mm 2mkn;
// reductions (and sum_to_size) the input's numel; shape, fill and scalar ops
// none; metafuse::adam the 13 elementwise ops of the generic chain it stands
// for (+1 maximize, +1 weight decay) per element; any other op (elementwise)
// the numel of its first output. Convolutions are not modelled.
double NodeFlops(const torch::jit::Node* n, const Sizes& sizes) {
  static const std::unordered_set<std::string> kFree = {
      "aten::size", "aten::numel", "aten::expand", "aten::view", "aten::reshape",
      "aten::t", "aten::transpose", "aten::unsqueeze", "aten::squeeze",
      "aten::permute", "aten::flatten", "aten::contiguous", "aten::clone",
      "aten::zeros_like", "aten::ones_like", "aten::type_as"};
  static const std::unordered_set<std::string> kReductions = {
      "aten::sum", "aten::mean", "aten::logsumexp", "aten::amax",
      "aten::sum_to_size", "aten::argmax", "aten::argmin"};
  const std::string name = n->kind().toQualString();
  if (n->kind().is_prim() || kFree.count(name) || n->outputs().empty() ||
      !n->output(0)->type()->cast<c10::TensorType>())
    return 0.0;
  if (name == "aten::mm") {
    auto a = sizes.find(n->input(0)), b = sizes.find(n->input(1));
    if (a == sizes.end() || b == sizes.end()) return 0.0;
    return 2.0 * a->second.at(0) * a->second.at(1) * b->second.at(1);
  }
  if (name == "aten::bmm") {
    auto a = sizes.find(n->input(0)), b = sizes.find(n->input(1));
    if (a == sizes.end() || b == sizes.end()) return 0.0;
    return 2.0 * a->second.at(0) * a->second.at(1) * a->second.at(2) * b->second.at(2);
  }
  if (kReductions.count(name)) return static_cast<double>(Numel(sizes, n->input(0)));
  if (name == "metafuse::adam") {
    auto hyper = [&](const char* h) {
      return *torch::jit::toIValue(n->namedInput(c10::Symbol::attr(h)));
    };
    const double per_element = 13.0 + (hyper("maximize").toBool() ? 1.0 : 0.0) +
                               (hyper("weight_decay").toDouble() != 0.0 ? 1.0 : 0.0);
    return per_element * static_cast<double>(Numel(sizes, n->output(1)));
  }
  return static_cast<double>(Numel(sizes, n->output(0)));
}

}  // namespace

std::pair<NodeCount, std::vector<c10::IValue>> CountProgram(
    const std::shared_ptr<torch::jit::Graph>& graph, std::vector<c10::IValue> inputs) {
  std::shared_ptr<torch::jit::Graph> probe = graph->copy();
  const size_t num_outputs = probe->outputs().size();
  std::vector<torch::jit::Value*> produced;
  for (torch::jit::Node* n : probe->nodes()) {
    for (torch::jit::Value* v : n->outputs()) {
      if (v->type()->cast<c10::TensorType>()) produced.push_back(v);
    }
  }
  for (torch::jit::Value* v : produced) probe->registerOutput(v);
  Sizes sizes;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].isTensor()) sizes[probe->inputs()[i]] = inputs[i].toTensor().sizes().vec();
  }
  std::vector<c10::IValue> out = MakeProgram(*probe, "count").Run(std::move(inputs));
  for (size_t i = 0; i < produced.size(); ++i) {
    sizes[produced[i]] = out[num_outputs + i].toTensor().sizes().vec();
  }
  int64_t nodes = 0;
  double flops = 0.0;
  for (const torch::jit::Node* n : probe->nodes()) {
    if (n->kind() == torch::jit::prim::Constant) continue;
    ++nodes;
    flops += NodeFlops(n, sizes);
  }
  out.resize(num_outputs);
  return {NodeCount{nodes, flops}, std::move(out)};
}


ProgramCounts CountSplitProgram(const SplitProgram& split, const std::vector<at::Tensor>& inputs) {
  auto [forward, out] =
      CountProgram(split.forward, std::vector<c10::IValue>(inputs.begin(), inputs.end()));
  std::vector<c10::IValue> backward_inputs(out.begin() + split.num_outputs, out.end());
  for (int64_t i = 0; i < split.num_outputs; ++i) {
    backward_inputs.push_back(at::ones_like(out[i].toTensor()));
  }
  return ProgramCounts{forward, CountProgram(split.backward, std::move(backward_inputs)).first};
}

}  // namespace metafuse::compiler
