// BroadcastExpandedOperands: elementwise readers of an expansion read its
// source where broadcasting makes the same result; other readers keep the
// expansion; the specialized program equals the generic one.
#include <memory>
#include <string>

#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/irparser.h>
#include <torch/torch.h>

#include "compiler/fusion/broadcast_expanded_operands.h"
#include "compiler/specialize/specialize_shapes.h"
#include "tests/cpp/compiler/specialized_runner.h"

namespace metafuse::compiler {
namespace {

using torch::jit::Graph;

// One step of SGD per task from shared meta-parameters, as metafuse.vmap
// traces it: %w expanded to the task count, read by the product (in place),
// by the update (broadcast), by a ReLU (whose result would shrink: kept)
// and next to a float64 0-dim scale (type promotion: kept).
constexpr const char* kIr = R"IR(
graph(%w : Tensor, %x : Tensor, %g : Tensor, %s : Tensor):
  %one : int = prim::Constant[value=1]()
  %lr : float = prim::Constant[value=0.01]()
  %false : bool = prim::Constant[value=0]()
  %tasks : int = prim::Constant[value=25]()
  %rows : int = prim::Constant[value=40]()
  %sizes : int[] = prim::ListConstruct(%tasks, %rows, %rows)
  %we : Tensor = aten::expand(%w, %sizes, %false)
  %h : Tensor = aten::bmm(%x, %we)
  %step : Tensor = aten::mul(%g, %lr)
  %new : Tensor = aten::sub(%we, %step, %one)
  %pos : Tensor = aten::relu(%we)
  %scaled : Tensor = aten::mul(%we, %s)
  return (%h, %new, %pos, %scaled)
)IR";

std::vector<c10::IValue> Inputs() {
  torch::manual_seed(3);
  return {torch::randn({40, 40}), torch::randn({25, 10, 40}), torch::randn({25, 40, 40}),
          torch::randn({}, torch::kFloat64)};
}

TEST(BroadcastExpandedOperands, ElementwiseReadersReadTheSource) {
  auto graph = ParseGraph(kIr);
  SpecializeShapes(graph, Inputs());
  EXPECT_EQ(BroadcastExpandedOperands(graph), 1) << *graph;
  for (const torch::jit::Node* n : graph->nodes()) {
    const std::string kind = n->kind().toQualString();
    if (kind == "aten::sub") {
      EXPECT_EQ(n->input(0), graph->inputs()[0]) << *graph;
    }
    if (kind == "aten::bmm" || kind == "aten::relu") {
      EXPECT_EQ(n->inputs().back()->node()->kind().toQualString(), std::string("aten::expand"))
          << *graph;
    }
  }
}

// The same update with no other reader: the expansion itself goes (it would
// otherwise still run as an instruction).
TEST(BroadcastExpandedOperands, ExpansionNothingReadsGoes) {
  auto graph = ParseGraph(R"IR(
graph(%w : Tensor, %g : Tensor):
  %one : int = prim::Constant[value=1]()
  %false : bool = prim::Constant[value=0]()
  %tasks : int = prim::Constant[value=25]()
  %rows : int = prim::Constant[value=40]()
  %sizes : int[] = prim::ListConstruct(%tasks, %rows, %rows)
  %we : Tensor = aten::expand(%w, %sizes, %false)
  %new : Tensor = aten::sub(%we, %g, %one)
  return (%new)
)IR");
  torch::manual_seed(3);
  SpecializeShapes(graph, {torch::randn({40, 40}), torch::randn({25, 40, 40})});
  EXPECT_EQ(BroadcastExpandedOperands(graph), 1) << *graph;
  for (const torch::jit::Node* n : graph->nodes()) {
    EXPECT_NE(n->kind().toQualString(), std::string("aten::expand")) << *graph;
  }
}

TEST(BroadcastExpandedOperands, SpecializedProgramEqualsGeneric) {
  ExpectSpecializedEqualsGeneric(kIr, Inputs, 1e-5, 1e-6);
}

}  // namespace
}  // namespace metafuse::compiler
