// ScatterIntoFreshZeros: scatter_add into zeros that nothing else reads is
// one metafuse::scatter_add_into_zeros; zeros read elsewhere stay; the
// specialized program equals the generic one bit for bit (repeated indices
// add in index order in both).
#include <memory>
#include <string>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "compiler/fusion/scatter_into_zeros.h"
#include "compiler/specialize/specialize_shapes.h"
#include "tests/cpp/compiler/specialized_runner.h"

namespace metafuse::compiler {
namespace {

// %g is a max-pool gradient as autodiff and shape specialization leave it
// (the zeros of a zeros_like); %h scatters into zeros also returned.
constexpr const char* kIr = R"IR(
graph(%x : Tensor, %index : Tensor, %src : Tensor):
  %none : NoneType = prim::Constant()
  %last : int = prim::Constant[value=-1]()
  %g0 : Tensor = aten::zeros_like(%x, %none, %none, %none, %none, %none)
  %g : Tensor = aten::scatter_add(%g0, %last, %index, %src)
  %h0 : Tensor = aten::zeros_like(%x, %none, %none, %none, %none, %none)
  %h : Tensor = aten::scatter_add(%h0, %last, %index, %src)
  return (%g, %h, %h0)
)IR";

std::vector<c10::IValue> Inputs() {
  torch::manual_seed(7);
  return {torch::randn({6, 4, 16}), torch::randint(0, 16, {6, 4, 9}), torch::randn({6, 4, 9})};
}

TEST(ScatterIntoFreshZeros, ScatterIntoUnreadZerosIsOneOperation) {
  auto graph = ParseGraph(kIr);
  SpecializeShapes(graph, Inputs());  // zeros_like -> zeros of the recorded type
  EXPECT_EQ(ScatterIntoFreshZeros(graph), 1) << *graph;
  int fused = 0, scatters = 0;
  for (const torch::jit::Node* n : graph->nodes()) {
    const std::string kind = n->kind().toQualString();
    fused += kind == "metafuse::scatter_add_into_zeros";
    scatters += kind == "aten::scatter_add";
  }
  EXPECT_EQ(fused, 1) << *graph;
  EXPECT_EQ(scatters, 1) << *graph;  // %h: its zeros are an output too
  EXPECT_EQ(graph->outputs()[0]->node()->kind().toQualString(),
            std::string("metafuse::scatter_add_into_zeros"))
      << *graph;
}

TEST(ScatterIntoFreshZeros, SpecializedProgramEqualsGeneric) {
  ExpectSpecializedEqualsGeneric(kIr, Inputs, 0, 0);
}

}  // namespace
}  // namespace metafuse::compiler
