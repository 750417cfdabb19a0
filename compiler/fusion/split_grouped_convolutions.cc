#include "compiler/fusion/split_grouped_convolutions.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <ATen/Parallel.h>
#include <ATen/TracerMode.h>
#include <torch/csrc/jit/ir/constants.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>

#include "compiler/ir/ir_helpers.h"
#include "compiler/ir/shape_facts.h"
#include "runtime/tuning/measured_choice.h"
#include "runtime/base/options.h"

namespace metafuse::compiler {

using torch::jit::Node;
using torch::jit::Value;
namespace aten = torch::jit::aten;

namespace {

// A grouped convolution the pass can time and split: complete input and
// weight types and constant arguments.
struct GroupedConvolution {
  bool transposed = false;
  c10::TensorTypePtr x, w, out;
  std::vector<int64_t> stride, padding, dilation, output_padding;
  int64_t groups = 1;
  bool has_bias = false;
};

std::optional<GroupedConvolution> Describe(const Node* n) {
  // conv2d(x, w, b, stride, padding, dilation, groups)
  // conv_transpose2d(x, w, b, stride, padding, output_padding, groups, dilation)
  GroupedConvolution c;
  c.transposed = n->kind() == aten::conv_transpose2d;
  if (!c.transposed && n->kind() != aten::conv2d) return std::nullopt;
  if (n->inputs().size() != 7u + c.transposed) return std::nullopt;
  auto groups = torch::jit::constant_as<int64_t>(n->input(6));
  auto stride = ConstantIntList(n->input(3)), padding = ConstantIntList(n->input(4));
  auto dilation = ConstantIntList(n->input(c.transposed ? 7 : 5));
  std::optional<std::vector<int64_t>> output_padding;
  if (c.transposed) {
    output_padding = ConstantIntList(n->input(5));
    if (!output_padding) return std::nullopt;
    c.output_padding = *output_padding;
  }
  if (!groups || *groups <= 1 || !stride || !padding || !dilation) return std::nullopt;
  c.groups = *groups;
  c.stride = *stride;
  c.padding = *padding;
  c.dilation = *dilation;
  c.x = CompleteTensorType(n->input(0));
  c.w = CompleteTensorType(n->input(1));
  c.out = CompleteTensorType(n->output());
  if (!c.x || !c.w || !c.out || c.x->dim() != 4u || c.w->dim() != 4u ||
      c.x->device() != at::kCPU) {
    return std::nullopt;
  }
  c.has_bias = n->input(2)->type()->kind() != c10::TypeKind::NoneType;
  const int64_t in_per_group = *c.x->sizes()[1] / c.groups;
  if (in_per_group < 4) return std::nullopt;  // depthwise-like: one call is right
  return c;
}

at::Tensor Run(const GroupedConvolution& c, const at::Tensor& x, const at::Tensor& w,
               int64_t groups) {
  if (c.transposed) {
    return at::conv_transpose2d(x, w, {}, c.stride, c.padding, c.output_padding, groups,
                                c.dilation);
  }
  return at::conv2d(x, w, {}, c.stride, c.padding, c.dilation, groups);
}

// The cost check: whether G separate convolutions beat the grouped one (the
// default) by the tuning library's margin, timed by its rule on a one-image
// proxy; the choice is kept per process and in the machine's file.
bool SplitIsFaster(const GroupedConvolution& c, double* measure_seconds) {
  std::vector<int64_t> xs = *c.x->sizes().concrete_sizes();
  const std::vector<int64_t> ws = *c.w->sizes().concrete_sizes();
  xs[0] = 1;
  std::ostringstream key;
  key << c.transposed << "|" << c10::IntArrayRef(xs) << c10::IntArrayRef(ws)
      << c10::IntArrayRef(c.stride) << c10::IntArrayRef(c.padding)
      << c10::IntArrayRef(c.dilation) << c10::IntArrayRef(c.output_padding) << c.groups << "|"
      << *c.x->scalarType() << "|threads " << at::get_num_threads();
  static const std::string identity = runtime::CpuModel() + "|" + at::show_config();
  const std::string chosen = runtime::ChooseMeasured(
      "grouped_convolution_split", identity, key.str(), [&](std::string* note) {
        const auto start = std::chrono::steady_clock::now();
        const auto options = at::TensorOptions().dtype(*c.x->scalarType());
        // Neither recorded by autograd or an active tracer, nor drawing from
        // the user's random generator: constant operands time the same.
        at::NoGradGuard no_grad;
        at::tracer::impl::NoTracerDispatchMode no_tracer;
        const at::Tensor x = at::full(xs, 0.5, options), w = at::full(ws, 0.25, options);
        const std::vector<at::Tensor> x_parts = x.chunk(c.groups, 1),
                                      w_parts = w.chunk(c.groups, 0);
        const runtime::Timing timing = runtime::TimeCandidates(
            {{"grouped", [&] { Run(c, x, w, c.groups); }},
             {"split", [&] {
                std::vector<at::Tensor> outs;
                for (int64_t g = 0; g < c.groups; ++g) {
                  outs.push_back(Run(c, x_parts[g], w_parts[g], 1));
                }
                at::cat(outs, 1);
              }}});
        *measure_seconds +=
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        *note = timing.note;
        return std::string(timing.winner == 1 ? "split" : "grouped");
      });
  return chosen == "split";
}

c10::TensorTypePtr Typed(const c10::TensorTypePtr& like, std::vector<int64_t> sizes,
                         std::vector<int64_t> strides) {
  return c10::TensorType::create(*like->scalarType(), *like->device(),
                                 c10::VaryingShape<int64_t>(sizes),
                                 c10::VaryingShape<int64_t>(strides), false);
}

std::vector<int64_t> ContiguousStrides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> s(sizes.size(), 1);
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 2; d >= 0; --d) {
    s[d] = s[d + 1] * std::max<int64_t>(sizes[d + 1], 1);
  }
  return s;
}

// Group `g` of `v` along `dim` (G equal parts), typed as a view of `v`.
Value* Part(torch::jit::Graph& graph, Value* v, const c10::TensorTypePtr& type, int64_t dim,
            int64_t groups, int64_t g) {
  std::vector<int64_t> sizes = *type->sizes().concrete_sizes();
  const int64_t size = sizes[dim] / groups;
  Value* part = graph.insert(aten::slice, {v, dim, g * size, (g + 1) * size, 1});
  sizes[dim] = size;
  part->setType(Typed(type, sizes, *type->strides().concrete_sizes()));
  return part;
}

void Split(torch::jit::Graph& graph, Node* n, const GroupedConvolution& c) {
  torch::jit::WithInsertPoint guard(n);
  std::vector<int64_t> out_sizes = *c.out->sizes().concrete_sizes();
  out_sizes[1] /= c.groups;
  std::vector<Value*> outs;
  for (int64_t g = 0; g < c.groups; ++g) {
    std::vector<Value*> args(n->inputs().begin(), n->inputs().end());
    args[0] = Part(graph, n->input(0), c.x, 1, c.groups, g);
    args[1] = Part(graph, n->input(1), c.w, 0, c.groups, g);
    if (c.has_bias) {
      auto b = CompleteTensorType(n->input(2));
      const int64_t size = *b->sizes()[0] / c.groups;
      args[2] = graph.insert(aten::slice, {n->input(2), 0, g * size, (g + 1) * size, 1});
      args[2]->setType(Typed(b, {size}, {1}));
    }
    args[6] = graph.insertConstant(int64_t{1});
    Node* part = graph.create(n->kind(), args, 1);
    part->insertBefore(n);
    part->output()->setType(Typed(c.out, out_sizes, ContiguousStrides(out_sizes)));
    outs.push_back(part->output());
  }
  Value* list = graph.insertNode(graph.createList(c10::TensorType::get(), outs))->output();
  Value* cat = graph.insert(aten::cat, {list, 1});
  cat->setType(Typed(c.out, *c.out->sizes().concrete_sizes(),
                     ContiguousStrides(*c.out->sizes().concrete_sizes())));
  n->output()->replaceAllUsesWith(cat);
  n->destroy();
}

}  // namespace

ConvolutionSplitPolicy ConvolutionSplitPolicyFromEnvironment() {
  const std::string policy = runtime::OptionsFromEnvironment().split_convolutions;
  if (policy.empty()) return ConvolutionSplitPolicy::kMeasure;
  if (policy == "always") return ConvolutionSplitPolicy::kAlways;
  if (policy == "never") return ConvolutionSplitPolicy::kNever;
  TORCH_CHECK(false, "METAFUSE_SPLIT_CONVOLUTIONS='", policy,
              "'; expected 'always', 'never' or unset (measure)");
}

ConvolutionSplitStats SplitGroupedConvolutions(const std::shared_ptr<torch::jit::Graph>& graph,
                                               ConvolutionSplitPolicy policy) {
  ConvolutionSplitStats stats;
  std::vector<std::pair<Node*, GroupedConvolution>> chosen;
  for (Node* n : graph->nodes()) {
    auto c = Describe(n);
    if (!c) continue;
    ++stats.grouped;
    const bool split = policy == ConvolutionSplitPolicy::kMeasure
                           ? SplitIsFaster(*c, &stats.measure_seconds)
                           : policy == ConvolutionSplitPolicy::kAlways;
    if (policy != ConvolutionSplitPolicy::kMeasure) {
      runtime::ChoiceRecord record;
      record.table = "grouped_convolution_split";
      record.key = std::string(n->kind().toQualString()) + " groups " + std::to_string(c->groups);
      record.choice = split ? "split" : "grouped";
      record.source = runtime::ChoiceSource::kSetting;
      record.note = split ? "METAFUSE_SPLIT_CONVOLUTIONS=always" : "METAFUSE_SPLIT_CONVOLUTIONS=never";
      runtime::RecordChoice(record);
    }
    if (split) chosen.emplace_back(n, *c);
  }
  for (auto& [n, c] : chosen) Split(*graph, n, c);
  stats.split = static_cast<int64_t>(chosen.size());
  return stats;
}

}  // namespace metafuse::compiler
