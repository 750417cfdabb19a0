// LowerMatmulToGemm (IR before/after) and the metafuse::gemm runtime
// operation: every transpose combination, float32 and float64, against
// ATen's mm.
#include <memory>
#include <string>

#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/irparser.h>
#include <torch/torch.h>

#include "runtime/compute/gemm.h"
#include "compiler/lowering/lower_matmul.h"
#include "compiler/fusion/rank_one_products.h"
#include "compiler/specialize/specialize_shapes.h"
#include "tests/cpp/compiler/specialized_runner.h"

namespace metafuse::compiler {
namespace {

using torch::jit::Graph;

size_t Count(const Graph& graph, const std::string& kind) {
  size_t n = 0;
  for (const torch::jit::Node* node : graph.nodes()) n += node->kind().toQualString() == kind;
  return n;
}

constexpr const char* kProducts = R"IR(
graph(%a : Tensor, %b : Tensor, %c : Tensor):
  %at : Tensor = aten::t(%a)
  %bt : Tensor = aten::t(%b)
  %nn : Tensor = aten::mm(%a, %b)
  %tn : Tensor = aten::mm(%at, %c)
  %nt : Tensor = aten::mm(%c, %bt)
  %tt : Tensor = aten::mm(%bt, %at)
  return (%nn, %tn, %nt, %tt)
)IR";

TEST(LowerMatmulToGemm, FoldsTransposesIntoFlags) {
  auto graph = ParseGraph(kProducts);
  // a [3,4], b [4,3], c [3,3]: every product is defined.
  SpecializeShapes(graph, {torch::randn({3, 4}, torch::kFloat64),
                           torch::randn({4, 3}, torch::kFloat64),
                           torch::randn({3, 3}, torch::kFloat64)});
  EXPECT_EQ(LowerMatmulToGemm(graph), 4);
  EXPECT_EQ(Count(*graph, "aten::mm"), 0u);
  EXPECT_EQ(Count(*graph, "aten::t"), 0u);  // read only by the products
  std::string flags;
  for (const torch::jit::Node* node : graph->nodes()) {
    if (node->kind() != GemmKind()) continue;
    flags += std::to_string(node->i(c10::Symbol::attr("trans_a"))) +
             std::to_string(node->i(c10::Symbol::attr("trans_b"))) + " ";
  }
  EXPECT_EQ(flags, "00 10 01 11 ");
}

TEST(LowerMatmulToGemm, KeepsTransposesReadElsewhereAndSkipsIntegers) {
  auto graph = ParseGraph(R"IR(
graph(%a : Tensor, %b : Tensor):
  %at : Tensor = aten::t(%a)
  %p : Tensor = aten::mm(%at, %b)
  return (%p, %at)
)IR");
  SpecializeShapes(graph, {torch::randn({3, 4}, torch::kFloat64),
                           torch::randn({3, 2}, torch::kFloat64)});
  EXPECT_EQ(LowerMatmulToGemm(graph), 1);
  EXPECT_EQ(Count(*graph, "aten::t"), 1u);  // still returned

  auto ints = ParseGraph("graph(%a : Tensor, %b : Tensor):\n"
                    "  %p : Tensor = aten::mm(%a, %b)\n  return (%p)\n");
  SpecializeShapes(ints, {torch::ones({2, 2}, torch::kLong), torch::ones({2, 2}, torch::kLong)});
  EXPECT_EQ(LowerMatmulToGemm(ints), 0);
  EXPECT_EQ(Count(*ints, "aten::mm"), 1u);
}

TEST(LowerMatmulToGemm, FoldsTransposedProductsAndDoubleTransposes) {
  auto graph = ParseGraph(R"IR(
graph(%a : Tensor, %b : Tensor, %c : Tensor):
  %p : Tensor = aten::mm(%a, %b)
  %pt : Tensor = aten::t(%p)
  %q : Tensor = aten::mm(%pt, %c)
  %ct : Tensor = aten::t(%c)
  %ctt : Tensor = aten::t(%ct)
  %r : Tensor = aten::mm(%q, %ctt)
  return (%r)
)IR");
  std::vector<c10::IValue> inputs = {torch::randn({3, 4}, torch::kFloat64),
                                     torch::randn({4, 3}, torch::kFloat64),
                                     torch::randn({3, 3}, torch::kFloat64)};
  auto expected = graph->copy();
  SpecializeShapes(graph, inputs);
  EXPECT_EQ(LowerMatmulToGemm(graph), 3);
  EXPECT_EQ(Count(*graph, "aten::t"), 0u);
  EXPECT_EQ(Count(*graph, "metafuse::gemm"), 3u);
  SpecializedRunner fused(expected->copy(), "gemm", nullptr);
  SpecializedRunner generic(expected->copy(), "mm", nullptr);
  generic.set_fusion(false);
  // A column-major input (a transposed view) is read in place, not copied.
  std::vector<c10::IValue> column_major = {inputs[0],
                                           torch::randn({3, 4}, torch::kFloat64).t(),
                                           inputs[2]};
  for (const auto& in : {inputs, column_major}) {
    EXPECT_TRUE(torch::allclose(fused.Run(in)[0].toTensor(), generic.Run(in)[0].toTensor(),
                                1e-12, 1e-12));
  }
}

TEST(LowerMatmulToGemm, AdditionsOfProductsAccumulate) {
  // %s1 dies at its addition (its buffer is reused); %c is read again, so
  // the second accumulation works on a copy and %c stays intact.
  auto graph = ParseGraph(R"IR(
graph(%a : Tensor, %b : Tensor, %c : Tensor):
  %one : int = prim::Constant[value=1]()
  %p : Tensor = aten::mm(%a, %b)
  %s1 : Tensor = aten::mul(%c, %c)
  %acc1 : Tensor = aten::add(%s1, %p, %one)
  %q : Tensor = aten::mm(%b, %a)
  %acc2 : Tensor = aten::add(%q, %c, %one)
  %r : Tensor = aten::add(%acc2, %c, %one)
  return (%acc1, %r)
)IR");
  std::vector<c10::IValue> inputs = {torch::randn({3, 3}, torch::kFloat64),
                                     torch::randn({3, 3}, torch::kFloat64),
                                     torch::randn({3, 3}, torch::kFloat64)};
  auto lowered = graph->copy();
  SpecializeShapes(lowered, inputs);
  EXPECT_EQ(LowerMatmulToGemm(lowered), 2);
  size_t accumulating = 0;
  for (const torch::jit::Node* node : lowered->nodes()) {
    accumulating += node->kind() == GemmKind() && node->inputs().size() == 3;
  }
  EXPECT_EQ(accumulating, 2u);
  EXPECT_EQ(Count(*lowered, "aten::add"), 1u);  // %r: no product in it
  const at::Tensor c_before = inputs[2].toTensor().clone();
  SpecializedRunner fused(graph->copy(), "gemm", nullptr);
  SpecializedRunner generic(graph->copy(), "mm", nullptr);
  generic.set_fusion(false);
  for (int run = 0; run < 2; ++run) {
    auto got = fused.Run(inputs);
    auto want = generic.Run(inputs);
    for (size_t k = 0; k < want.size(); ++k) {
      EXPECT_TRUE(torch::allclose(got[k].toTensor(), want[k].toTensor(), 1e-12, 1e-12)) << k;
    }
  }
  EXPECT_TRUE(torch::equal(inputs[2].toTensor(), c_before));
}

// The program of `ir` run with GEMM lowering (fused) and without (generic,
// ATen's mm / bmm) on `inputs`: `gemms` GEMM instructions, equal results.
void ExpectGemmsMatchGeneric(const char* ir, const std::vector<c10::IValue>& inputs,
                             torch::Dtype dtype, int64_t gemms) {
  auto graph = ParseGraph(ir);
  SpecializedRunner fused(graph->copy(), "gemm", nullptr);
  SpecializedRunner generic(graph->copy(), "generic", nullptr);
  generic.set_fusion(false);
  auto got = fused.Run(inputs);
  auto want = generic.Run(inputs);
  EXPECT_EQ(fused.report().gemms, gemms);
  const double tol = dtype == torch::kFloat32 ? 1e-5 : 1e-12;
  for (size_t k = 0; k < want.size(); ++k) {
    EXPECT_TRUE(torch::allclose(got[k].toTensor(), want[k].toTensor(), tol, tol))
        << "product " << k;
  }
}

TEST(GemmOperation, EveryTransposeCombinationMatchesMm) {
  ASSERT_TRUE(runtime::DirectBlasAvailable()) << "LibTorch's BLAS was not found in the process";
  for (auto dtype : {torch::kFloat32, torch::kFloat64}) {
    auto opts = torch::TensorOptions().dtype(dtype);
    std::vector<c10::IValue> inputs = {torch::randn({5, 7}, opts), torch::randn({7, 5}, opts),
                                       torch::randn({5, 5}, opts)};
    ExpectGemmsMatchGeneric(kProducts, inputs, dtype, 4);
  }
}

// Per-task products (metafuse.vmap): aten::bmm with transposes of the last
// two dims folded into the flags, a transposed product swapped, every
// combination against ATen's bmm; a batch-broadcast (expanded) operand is
// read through a copy.
TEST(GemmOperation, BatchedProductsMatchBmm) {
  ASSERT_TRUE(runtime::DirectBlasAvailable());
  constexpr const char* kBatched = R"IR(
graph(%a : Tensor, %b : Tensor, %c : Tensor):
  %one : int = prim::Constant[value=1]()
  %two : int = prim::Constant[value=2]()
  %minus1 : int = prim::Constant[value=-1]()
  %at : Tensor = aten::transpose(%a, %one, %two)
  %bt : Tensor = aten::transpose(%b, %minus1, %one)
  %nn : Tensor = aten::bmm(%a, %b)
  %tn : Tensor = aten::bmm(%at, %c)
  %nt : Tensor = aten::bmm(%c, %bt)
  %tt : Tensor = aten::bmm(%bt, %at)
  %nnt : Tensor = aten::transpose(%nn, %two, %one)
  return (%nn, %tn, %nt, %tt, %nnt)
)IR";
  for (auto dtype : {torch::kFloat32, torch::kFloat64}) {
    auto opts = torch::TensorOptions().dtype(dtype);
    std::vector<c10::IValue> inputs = {torch::randn({6, 5, 7}, opts),
                                       torch::randn({1, 7, 5}, opts).expand({6, 7, 5}),
                                       torch::randn({6, 5, 5}, opts)};
    ExpectGemmsMatchGeneric(kBatched, inputs, dtype, 4);
  }
}

// Products of every task's rows with one shared matrix (an expanded B,
// the meta-parameters at the first inner step) run as one tall GEMM, also
// accumulating; a slice of a longer stack (tasks further apart) or a
// transposed A keeps one product per task. All against ATen's bmm.
TEST(GemmOperation, SharedRightOperandMergesTheTasks) {
  ASSERT_TRUE(runtime::DirectBlasAvailable());
  constexpr const char* kIr = R"IR(
graph(%a : Tensor, %b : Tensor, %c : Tensor, %d : Tensor):
  %one : int = prim::Constant[value=1]()
  %two : int = prim::Constant[value=2]()
  %p : Tensor = aten::bmm(%a, %b)
  %s : Tensor = aten::add(%c, %p, %one)
  %dt : Tensor = aten::transpose(%d, %one, %two)
  %q : Tensor = aten::bmm(%dt, %b)
  %r : Tensor = aten::bmm(%d, %b)
  return (%s, %q, %r)
)IR";
  for (auto dtype : {torch::kFloat32, torch::kFloat64}) {
    auto opts = torch::TensorOptions().dtype(dtype);
    const at::Tensor shared = torch::randn({1, 40, 40}, opts).expand({25, 40, 40});
    ExpectGemmsMatchGeneric(kIr,
                            {torch::randn({25, 10, 40}, opts), shared,
                             torch::randn({25, 10, 40}, opts), torch::randn({25, 40, 40}, opts)},
                            dtype, 3);
    // A slice of a longer stack: the tasks are 20 rows apart.
    ExpectGemmsMatchGeneric(kIr,
                            {torch::randn({25, 20, 40}, opts).narrow(1, 5, 10), shared,
                             torch::randn({25, 10, 40}, opts), torch::randn({25, 40, 40}, opts)},
                            dtype, 3);
  }
}

// A transposed sum of products (a weight gradient summed over inner steps,
// read in the weight's layout): t(acc + P) becomes one product accumulating
// into t(acc), and when acc is a product read only there, that one is
// swapped too, so no transposed copy is left for a fused kernel to make.
// Operands that are slices of larger stacks (a task's support rows) are
// read in place at their task stride.
TEST(LowerMatmulToGemm, TransposedAccumulationsFoldIntoSwappedProducts) {
  constexpr const char* kIr = R"IR(
graph(%a : Tensor, %b : Tensor, %c : Tensor, %d : Tensor):
  %one : int = prim::Constant[value=1]()
  %two : int = prim::Constant[value=2]()
  %at : Tensor = aten::transpose(%a, %one, %two)
  %ct : Tensor = aten::transpose(%c, %one, %two)
  %p : Tensor = aten::bmm(%at, %b)
  %q : Tensor = aten::bmm(%ct, %d)
  %s : Tensor = aten::add(%p, %q, %one)
  %st : Tensor = aten::transpose(%s, %one, %two)
  %r : Tensor = aten::mul(%st, %st)
  return (%r)
)IR";
  for (auto dtype : {torch::kFloat32, torch::kFloat64}) {
    auto opts = torch::TensorOptions().dtype(dtype);
    // a, c: [T, K, M] (c a slice of a longer stack); b, d: [T, K, N].
    std::vector<c10::IValue> inputs = {torch::randn({4, 10, 6}, opts),
                                       torch::randn({4, 10, 5}, opts),
                                       torch::randn({4, 20, 6}, opts).narrow(1, 3, 10),
                                       torch::randn({4, 10, 5}, opts)};
    auto graph = ParseGraph(kIr);
    SpecializeShapes(graph, inputs);
    EXPECT_EQ(LowerMatmulToGemm(graph), 2);
    EXPECT_EQ(Count(*graph, "aten::transpose"), 0u) << *graph;
    EXPECT_EQ(Count(*graph, "aten::add"), 0u) << *graph;
    ExpectGemmsMatchGeneric(kIr, inputs, dtype, 2);
  }
}

// Products over a contraction of size 1 (a layer from one feature, the
// gradient through a layer to one output) become broadcast multiplies, per
// task for bmm; other products stay. Through the whole specialized pipeline
// the result has the same bits as ATen's bmm (one multiply per element).
TEST(RankOneProductsToMultiplies, OuterProductsBecomeMultipliesWithTheSameBits) {
  constexpr const char* kIr = R"IR(
graph(%x : Tensor, %w : Tensor, %b : Tensor, %h : Tensor, %v : Tensor):
  %one : int = prim::Constant[value=1]()
  %two : int = prim::Constant[value=2]()
  %wt : Tensor = aten::transpose(%w, %one, %two)
  %outer : Tensor = aten::bmm(%x, %wt)
  %pre : Tensor = aten::add(%outer, %b, %one)
  %act : Tensor = aten::relu(%pre)
  %dense : Tensor = aten::bmm(%h, %v)
  return (%act, %dense)
)IR";
  const std::string ir = kIr;
  torch::manual_seed(5);
  std::vector<c10::IValue> inputs = {
      torch::randn({25, 10, 1}), torch::randn({25, 40, 1}), torch::randn({25, 1, 40}),
      torch::randn({25, 10, 40}), torch::randn({25, 40, 40})};
  auto graph = ParseGraph(ir);
  SpecializeShapes(graph, inputs);
  EXPECT_EQ(RankOneProductsToMultiplies(graph), 1);
  EXPECT_EQ(Count(*graph, "aten::bmm"), 1u) << *graph;  // the dense one stays
  EXPECT_EQ(Count(*graph, "aten::mul"), 1u) << *graph;

  auto x = inputs[0].toTensor(), w = inputs[1].toTensor(), b = inputs[2].toTensor();
  const at::Tensor want = at::relu(at::bmm(x, w.transpose(1, 2)) + b);
  SpecializedRunner runner(ParseGraph(ir), "rank_one", nullptr);
  const auto got = runner.Run(inputs);
  EXPECT_TRUE(at::equal(got[0].toTensor(), want))
      << (got[0].toTensor() - want).abs().max().item<double>();
  EXPECT_TRUE(at::allclose(got[1].toTensor(),
                           at::bmm(inputs[3].toTensor(), inputs[4].toTensor()), 1e-5, 1e-5));

  // Plain matrices: [M, 1] x [1, N].
  auto g2 = ParseGraph(R"IR(
graph(%a : Tensor, %c : Tensor):
  %p : Tensor = aten::mm(%a, %c)
  return (%p)
)IR");
  SpecializeShapes(g2, {torch::randn({7, 1}), torch::randn({1, 9})});
  EXPECT_EQ(RankOneProductsToMultiplies(g2), 1);
  EXPECT_EQ(Count(*g2, "aten::mm"), 0u);
}

}  // namespace
}  // namespace metafuse::compiler
