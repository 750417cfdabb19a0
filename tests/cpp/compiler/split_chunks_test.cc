// SplitChunksIntoCrops: chunks and splits unpacked at once become crops, so
// RemoveTensorMutation can make the in-place ops on the pieces functional
// (gru_cell's gates); the result equals eager's; a chunk whose list is used
// otherwise stays.
#include "compiler/decompose/split_chunks.h"

#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/irparser.h>
#include <torch/csrc/jit/passes/remove_mutation.h>
#include <torch/torch.h>

#include <memory>
#include <string>

#include "compiler/lowering/lower_to_program.h"
#include "runtime/executor/program.h"

namespace metafuse::compiler {
namespace {

// gru_cell's gate arithmetic on chunks of two [2, 6] gate tensors.
constexpr const char* kIr = R"IR(
graph(%i : Double(2, 6, strides=[6, 1], requires_grad=0, device=cpu),
      %h : Double(2, 6, strides=[6, 1], requires_grad=0, device=cpu)):
  %three : int = prim::Constant[value=3]()
  %one : int = prim::Constant[value=1]()
  %il : Tensor[] = aten::unsafe_chunk(%i, %three, %one)
  %i0 : Double(2, 2, strides=[6, 1], requires_grad=0, device=cpu), %i1 : Double(2, 2, strides=[6, 1], requires_grad=0, device=cpu), %i2 : Double(2, 2, strides=[6, 1], requires_grad=0, device=cpu) = prim::ListUnpack(%il)
  %hl : Tensor[] = aten::split(%h, %three, %one)
  %h0 : Double(2, 3, strides=[6, 1], requires_grad=0, device=cpu), %h1 : Double(2, 3, strides=[6, 1], requires_grad=0, device=cpu) = prim::ListUnpack(%hl)
  %r : Tensor = aten::add_(%i0, %i1, %one)
  %s : Tensor = aten::sigmoid_(%r)
  %t : Tensor = aten::mul_(%h0, %h1)
  return (%s, %i2, %t)
)IR";

std::shared_ptr<torch::jit::Graph> Parse(const char* ir) {
  auto graph = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR(ir, graph.get());
  return graph;
}

int Count(const torch::jit::Graph& graph, const std::string& kind) {
  int n = 0;
  for (const torch::jit::Node* node : graph.nodes())
    n += node->kind().toQualString() == kind;
  return n;
}

TEST(SplitChunksIntoCrops, PiecesAreCropsAndTheirInPlaceOpsBecomeFunctional) {
  auto graph = Parse(kIr);
  EXPECT_EQ(SplitChunksIntoCrops(graph), 2) << *graph;
  EXPECT_EQ(Count(*graph, "aten::constant_pad_nd"), 5) << *graph;
  EXPECT_EQ(Count(*graph, "prim::ListUnpack"), 0) << *graph;
  torch::jit::RemoveTensorMutation(graph);
  for (const char* in_place : {"aten::add_", "aten::sigmoid_", "aten::mul_"})
    EXPECT_EQ(Count(*graph, in_place), 0) << in_place << "\n" << *graph;

  torch::manual_seed(3);
  at::Tensor i = torch::randn({2, 6}, torch::kDouble),
             h = torch::randn({2, 6}, torch::kDouble);
  runtime::Program program = MakeProgram(*graph);
  auto out = program.Run({i, h});
  auto ic = i.chunk(3, 1);
  auto hc = h.split(3, 1);
  EXPECT_TRUE(
      torch::allclose(out[0].toTensor(), torch::sigmoid(ic[0] + ic[1]), 0, 0));
  EXPECT_TRUE(torch::equal(out[1].toTensor(), ic[2]));
  EXPECT_TRUE(torch::equal(out[2].toTensor(), hc[0] * hc[1]));
}

TEST(SplitChunksIntoCrops, AChunkWhoseListIsReadElsewhereStays) {
  auto graph = Parse(R"IR(
graph(%i : Double(2, 6, strides=[6, 1], requires_grad=0, device=cpu)):
  %three : int = prim::Constant[value=3]()
  %one : int = prim::Constant[value=1]()
  %il : Tensor[] = aten::chunk(%i, %three, %one)
  %n : int = aten::len(%il)
  return (%n)
)IR");
  EXPECT_EQ(SplitChunksIntoCrops(graph), 0);
  EXPECT_EQ(Count(*graph, "aten::chunk"), 1);
}

}  // namespace
}  // namespace metafuse::compiler
