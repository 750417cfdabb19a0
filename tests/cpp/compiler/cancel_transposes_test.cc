// CancelTransposesAroundElementwise: t(mul(t(a), t(b))) computes mul(a, b);
// an operation with another reader, or operands transposed differently,
// stays; the specialized program equals the generic one.
#include <memory>
#include <string>

#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/irparser.h>
#include <torch/torch.h>

#include "compiler/fusion/cancel_transposes.h"
#include "compiler/specialize/specialize_shapes.h"
#include "tests/cpp/compiler/specialized_runner.h"

namespace metafuse::compiler {
namespace {

// The gradient of a batched outer product as autodiff leaves it (%grad),
// next to one whose result is also read untransposed (%kept) and one whose
// operands swap different dims (%mixed).
constexpr const char* kIr = R"IR(
graph(%a : Tensor, %b : Tensor, %c : Tensor, %d : Tensor):
  %zero : int = prim::Constant[value=0]()
  %one : int = prim::Constant[value=1]()
  %two : int = prim::Constant[value=2]()
  %at : Tensor = aten::transpose(%a, %one, %two)
  %bt : Tensor = aten::transpose(%b, %two, %one)
  %prod : Tensor = aten::mul(%at, %bt)
  %grad : Tensor = aten::transpose(%prod, %one, %two)
  %ct : Tensor = aten::transpose(%c, %one, %two)
  %sum : Tensor = aten::add(%ct, %at, %one)
  %kept : Tensor = aten::transpose(%sum, %one, %two)
  %d01 : Tensor = aten::transpose(%d, %zero, %one)
  %d12 : Tensor = aten::transpose(%d, %one, %two)
  %mix : Tensor = aten::mul(%d01, %d12)
  %mixed : Tensor = aten::transpose(%mix, %one, %two)
  return (%grad, %kept, %sum, %mixed)
)IR";

std::vector<c10::IValue> Inputs() {
  torch::manual_seed(5);
  return {torch::randn({25, 1, 40}), torch::randn({25, 10, 1}), torch::randn({25, 10, 40}),
          torch::randn({8, 8, 8})};
}

TEST(CancelTransposes, ElementwiseBetweenTransposesComputesDirectly) {
  auto graph = ParseGraph(kIr);
  SpecializeShapes(graph, Inputs());
  EXPECT_EQ(CancelTransposesAroundElementwise(graph), 1) << *graph;
  // %grad is now mul(%a, %b), read by nothing transposed.
  const torch::jit::Node* grad = graph->outputs()[0]->node();
  EXPECT_EQ(grad->kind().toQualString(), std::string("aten::mul")) << *graph;
  EXPECT_EQ(grad->input(0), graph->inputs()[0]) << *graph;
  EXPECT_EQ(grad->input(1), graph->inputs()[1]) << *graph;
  int transposes = 0, muls = 0;
  for (const torch::jit::Node* n : graph->nodes()) {
    transposes += n->kind() == torch::jit::aten::transpose;
    muls += n->kind() == torch::jit::aten::mul;
  }
  // %at (read by the add), %ct, %kept, %d01, %d12, %mixed stay.
  EXPECT_EQ(transposes, 6) << *graph;
  EXPECT_EQ(muls, 2) << *graph;
}

TEST(CancelTransposes, SpecializedProgramEqualsGeneric) {
  ExpectSpecializedEqualsGeneric(kIr, Inputs, 0, 0);
}

}  // namespace
}  // namespace metafuse::compiler
