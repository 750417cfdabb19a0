// Unit tests of the shape-specialization and fusion passes, IR before and
// after: SpecializeShapes, FuseElementwise (and its reduction epilogues),
// MergeFusionGroups, FuseHorizontally /
// ReorderTopologically, PlanBuffers, ClassifyBroadcast / IsFusibleNode /
// LowerFusionGroup, and SpecializedRunner end to end. Graphs are parsed
// from IR text with untyped tensors and given complete types by
// SpecializeShapes on float64 inputs, as SpecializedRunner does; where a
// pass rewrites a graph, the rewritten graph is also run (fused groups as
// LLVM-compiled kernels) against the graph before the pass.
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/irparser.h>
#include <torch/csrc/jit/testing/file_check.h>
#include <torch/torch.h>

#include "compiler/fusion/fuse_elementwise.h"
#include "compiler/fusion/fuse_horizontal.h"
#include "compiler/ir/topological_order.h"
#include "compiler/fusion/fuse_pool_epilogue.h"
#include "runtime/executor/fused_kernel_launch.h"
#include "compiler/fusion/fusion_group.h"
#include "compiler/lowering/lower_fusion_group.h"
#include "compiler/lowering/lower_to_program.h"
#include "compiler/fusion/merge_fusion_groups.h"
#include "compiler/lowering/plan_buffers.h"
#include "compiler/specialize/specialize_shapes.h"
#include "tests/cpp/compiler/specialized_runner.h"
#include "compiler/codegen/kernel_ir.h"
#include "runtime/executor/program.h"
#include "runtime/program_value/program_serialization.h"

namespace metafuse::compiler {
namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;
using torch::jit::testing::FileCheck;
namespace kir = codegen::kir;

at::Tensor Randn(c10::IntArrayRef sizes) { return torch::randn(sizes, torch::kFloat64); }

// Top-level nodes of `kind` ("aten::mul").
std::vector<Node*> NodesOf(Graph& graph, const std::string& kind) {
  std::vector<Node*> found;
  for (Node* node : graph.nodes()) {
    if (node->kind().toQualString() == kind) found.push_back(node);
  }
  return found;
}
size_t Count(Graph& graph, const std::string& kind) { return NodesOf(graph, kind).size(); }

std::vector<Node*> Groups(Graph& graph) { return NodesOf(graph, "metafuse::FusionGroup"); }

const std::shared_ptr<Graph>& Sub(const Node* group) {
  return group->g(torch::jit::attr::Subgraph);
}

// Subgraph nodes other than constants.
size_t SubgraphOps(const Node* group) {
  size_t n = 0;
  for (const Node* node : Sub(group)->nodes()) n += node->kind() != torch::jit::prim::Constant;
  return n;
}

std::vector<at::Tensor> Tensors(const std::vector<c10::IValue>& values) {
  std::vector<at::Tensor> out;
  for (const c10::IValue& v : values) out.push_back(v.toTensor());
  return out;
}

std::vector<at::Tensor> RunPlain(const std::shared_ptr<Graph>& graph,
                                 const std::vector<c10::IValue>& inputs) {
  return Tensors(MakeProgram(*graph, "plain").Run(inputs));
}

// Runs a graph whose FusionGroup nodes launch LLVM-compiled kernels.
std::vector<at::Tensor> RunFused(const std::shared_ptr<Graph>& graph,
                                 const std::vector<c10::IValue>& inputs) {
  return Tensors(MakeProgram(*graph, "fused").Run(inputs));
}

void ExpectAllClose(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want,
                    double tol = 1e-12, double rtol = 0.0) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    ASSERT_EQ(got[k].sizes(), want[k].sizes()) << "output " << k;
    ASSERT_EQ(got[k].scalar_type(), want[k].scalar_type()) << "output " << k;
    EXPECT_TRUE(torch::allclose(got[k], want[k], rtol, tol))
        << "output " << k << "\n got " << got[k] << "\n want " << want[k];
  }
}

// A parsed graph specialized to `inputs` and fused vertically; `original`
// keeps an unspecialized copy to run as the reference.
struct Fused {
  std::shared_ptr<Graph> graph, original;
  FusionStats stats;
};
Fused SpecializeAndFuse(const std::string& ir, const std::vector<c10::IValue>& inputs) {
  Fused f;
  f.graph = ParseGraph(ir);
  f.original = f.graph->copy();
  SpecializeShapes(f.graph, inputs);
  f.stats = FuseElementwise(f.graph);
  f.graph->lint();
  return f;
}

// The only FusionGroup of `graph`; nullptr, with a failure, if there is not
// exactly one.
Node* OnlyGroup(Graph& graph) {
  auto groups = Groups(graph);
  EXPECT_EQ(groups.size(), 1u) << graph;
  return groups.size() == 1 ? groups[0] : nullptr;
}

// The fused graph (kernels compiled) computes what the graph before the
// passes does, and leaves the inputs the caller holds as they were. Sums
// (reduction epilogues) add in another order: `rtol` > 0 allows for it.
void ExpectFusedMatchesPlain(const Fused& f, const std::vector<c10::IValue>& inputs,
                             double rtol = 0.0) {
  std::vector<at::Tensor> held;
  for (const c10::IValue& v : inputs) {
    if (v.isTensor()) held.push_back(v.toTensor().clone());
  }
  ExpectAllClose(RunFused(f.graph, inputs), RunPlain(f.original, inputs), 1e-12, rtol);
  size_t k = 0;
  for (const c10::IValue& v : inputs) {
    if (v.isTensor()) {
      EXPECT_TRUE(torch::equal(v.toTensor(), held[k++])) << "input changed";
    }
  }
}

std::vector<int64_t> Reuse(const Node* group) { return group->is(ReuseAttr()); }

// ================================================================ SpecializeShapes

TEST(SpecializeShapes, FoldsSizeNumelAndDimIntoConstants) {
  auto graph = ParseGraph(R"IR(
graph(%x : Tensor, %y : Tensor):
  %s : int[] = aten::size(%x)
  %r : Tensor = aten::reshape(%y, %s)
  %n : int = aten::numel(%x)
  %d : int = aten::dim(%x)
  %k : int = aten::mul(%n, %d)
  %z : Tensor = aten::mul(%r, %k)
  return (%z)
)IR");
  torch::manual_seed(1);
  std::vector<c10::IValue> inputs = {Randn({3, 4}), Randn({12})};
  auto reference = RunPlain(graph->copy(), inputs);
  ShapeSpecialization result = SpecializeShapes(graph, inputs);
  graph->lint();
  EXPECT_EQ(result.shape_queries_folded, 3);
  EXPECT_EQ(Count(*graph, "aten::size"), 0u) << *graph;
  EXPECT_EQ(Count(*graph, "aten::numel"), 0u) << *graph;
  EXPECT_EQ(Count(*graph, "aten::dim"), 0u) << *graph;

  // reshape reads the constant list [3, 4].
  auto reshapes = NodesOf(*graph, "aten::reshape");
  ASSERT_EQ(reshapes.size(), 1u) << *graph;
  Value* shape = reshapes[0]->input(1);
  ASSERT_EQ(shape->node()->kind(), torch::jit::prim::Constant) << *graph;
  EXPECT_EQ(torch::jit::toIValue(shape)->toIntVector(), (std::vector<int64_t>{3, 4}));
  // numel * dim = 12 * 2, folded by constant propagation: the tensor mul
  // reads the constant 24.
  auto muls = NodesOf(*graph, "aten::mul");
  ASSERT_EQ(muls.size(), 1u) << *graph;
  ASSERT_EQ(muls[0]->input(1)->node()->kind(), torch::jit::prim::Constant) << *graph;
  EXPECT_EQ(torch::jit::toIValue(muls[0]->input(1))->toInt(), 24);

  // Every tensor value got its complete type.
  auto z = CompleteTensorType(graph->outputs()[0]);
  ASSERT_NE(z, nullptr);
  EXPECT_EQ(*z->sizes().concrete_sizes(), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(*z->scalarType(), at::kDouble);

  ExpectAllClose(Tensors(result.outputs), reference);
  ExpectAllClose(RunPlain(graph, inputs), reference);
}

// A traced size read back as an int (prim::NumToTensor, aten::Int, as
// metafuse.vmap's expansions record it) is the int itself, and a list of
// constants lowers to a constant: no instruction builds either at run time.
TEST(SpecializeShapes, TracedSizesAndConstantListsAreNoInstructions) {
  auto graph = ParseGraph(R"IR(
graph(%x : Tensor):
  %n : int = prim::Constant[value=4]()
  %tasks : int = prim::Constant[value=3]()
  %false : bool = prim::Constant[value=0]()
  %t : Tensor = prim::NumToTensor(%n)
  %i : int = aten::Int(%t)
  %sizes : int[] = prim::ListConstruct(%tasks, %i)
  %e : Tensor = aten::expand(%x, %sizes, %false)
  %y : Tensor = aten::mul(%e, %e)
  return (%y)
)IR");
  std::vector<c10::IValue> inputs = {Randn({4})};
  auto reference = RunPlain(graph->copy(), inputs);
  SpecializeShapes(graph, inputs);
  EXPECT_EQ(Count(*graph, "aten::Int"), 0u) << *graph;
  EXPECT_EQ(Count(*graph, "prim::NumToTensor"), 0u) << *graph;
  runtime::ProgramCode code = LowerToProgram(*graph, "sizes");
  for (const auto& ins : code.instructions) {
    EXPECT_NE(ins.name, "prim::ListConstruct") << *graph;
  }
  EXPECT_EQ(code.instructions.size(), 2u) << *graph;  // expand, mul
  ExpectAllClose(RunPlain(graph, inputs), reference);
  // The constant list survives the program format.
  runtime::CompiledProgram value;
  value.forward = code;
  value.backward = code;
  value.num_inputs = 1;
  value.num_outputs = 1;
  auto loaded = runtime::DeserializeProgram(runtime::SerializeProgram(value));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectAllClose(Tensors(runtime::Program(loaded->forward).Run(inputs)), reference);
}

TEST(SpecializeShapes, RemovesIdentitySumToSizeAndTypeAsKeepsRealReduction) {
  auto graph = ParseGraph(R"IR(
graph(%a : Tensor, %b : Tensor, %c : Tensor):
  %one : int = prim::Constant[value=1]()
  %x : Tensor = aten::mul(%a, %b)
  %sa : int[] = aten::size(%a)
  %y : Tensor = aten::sum_to_size(%x, %sa)
  %t : Tensor = aten::type_as(%y, %a)
  %sc : int[] = aten::size(%c)
  %r : Tensor = aten::sum_to_size(%x, %sc)
  %u : Tensor = aten::add(%r, %c, %one)
  return (%t, %u)
)IR");
  torch::manual_seed(2);
  std::vector<c10::IValue> inputs = {Randn({3, 4}), Randn({3, 4}), Randn({4})};
  auto reference = RunPlain(graph->copy(), inputs);
  ShapeSpecialization result = SpecializeShapes(graph, inputs);
  graph->lint();
  EXPECT_EQ(result.identities_removed, 2) << *graph;
  EXPECT_EQ(Count(*graph, "aten::type_as"), 0u) << *graph;
  // The reduction to [4] stays, the one to [3, 4] is gone.
  auto sums = NodesOf(*graph, "aten::sum_to_size");
  ASSERT_EQ(sums.size(), 1u) << *graph;
  EXPECT_EQ(torch::jit::toIValue(sums[0]->input(1))->toIntVector(), (std::vector<int64_t>{4}));
  EXPECT_EQ(sums[0]->input(0)->node()->kind(), torch::jit::aten::mul);
  // The first output is the product itself.
  EXPECT_EQ(graph->outputs()[0]->node()->kind(), torch::jit::aten::mul) << *graph;
  FileCheck()
      .check("aten::mul")
      ->check_not("aten::type_as")
      ->check_count("aten::sum_to_size", 1, /*exactly=*/true)
      ->check("aten::add")
      ->run(*graph);

  ExpectAllClose(Tensors(result.outputs), reference);
  ExpectAllClose(RunPlain(graph, inputs), reference);
}

TEST(SpecializeShapes, RemovesNoOpExpandReshapeContiguousOnly) {
  auto graph = ParseGraph(R"IR(
graph(%a : Tensor, %f : Tensor):
  %false : bool = prim::Constant[value=0]()
  %none : NoneType = prim::Constant()
  %zero : int = prim::Constant[value=0]()
  %s : int[] = aten::size(%a)
  %e : Tensor = aten::expand(%a, %s, %false)
  %r : Tensor = aten::reshape(%e, %s)
  %v : Tensor = aten::reshape(%r, %s)
  %c : Tensor = aten::contiguous(%v, %zero)
  %tr : Tensor = aten::t(%c)
  %ct : Tensor = aten::contiguous(%tr, %zero)
  %tf : Tensor = aten::type_as(%c, %f)
  return (%ct, %tf)
)IR");
  torch::manual_seed(3);
  std::vector<c10::IValue> inputs = {Randn({3, 4}), torch::randn({2}, torch::kFloat32)};
  auto reference = RunPlain(graph->copy(), inputs);
  ShapeSpecialization result = SpecializeShapes(graph, inputs);
  graph->lint();
  EXPECT_EQ(result.identities_removed, 4) << *graph;
  EXPECT_EQ(Count(*graph, "aten::expand"), 0u) << *graph;
  EXPECT_EQ(Count(*graph, "aten::reshape"), 0u) << *graph;
  // contiguous of the transpose (not contiguous) stays, and type_as to
  // another dtype (float64 -> float32) stays.
  auto contiguous = NodesOf(*graph, "aten::contiguous");
  ASSERT_EQ(contiguous.size(), 1u) << *graph;
  EXPECT_EQ(contiguous[0]->input(0)->node()->kind(), torch::jit::aten::t);
  auto type_as = NodesOf(*graph, "aten::type_as");
  ASSERT_EQ(type_as.size(), 1u) << *graph;
  EXPECT_EQ(type_as[0]->input(0), graph->inputs()[0]) << *graph;
  EXPECT_EQ(NodesOf(*graph, "aten::t")[0]->input(0), graph->inputs()[0]) << *graph;

  auto got = RunPlain(graph, inputs);
  ASSERT_EQ(got.size(), reference.size());
  for (size_t k = 0; k < got.size(); ++k) EXPECT_TRUE(torch::equal(got[k], reference[k]));
  for (size_t k = 0; k < got.size(); ++k) {
    EXPECT_TRUE(torch::equal(result.outputs[k].toTensor(), reference[k]));
  }
}

TEST(SpecializeShapes, LossComputedOnlyToSeedItsGradientGoes) {
  // metafuse.vmap's inner step: the tasks' losses summed only so that
  // ones_like can seed their gradient, which a fused kernel then reads
  // (expand is fusible). The seed becomes aten::ones and the loss dies.
  // Another ones_like whose operand is read elsewhere stays.
  auto graph = ParseGraph(R"IR(
graph(%x : Tensor, %y : Tensor):
  %none : NoneType = prim::Constant()
  %false : bool = prim::Constant[value=0]()
  %dims : int[] = prim::Constant[value=[1]]()
  %tasks : int[] = prim::Constant[value=[4]]()
  %sq : Tensor = aten::mul(%x, %x)
  %loss : Tensor = aten::mean(%sq, %dims, %false, %none)
  %total : Tensor = aten::sum(%loss, %none)
  %seed : Tensor = aten::ones_like(%total, %none, %none, %none, %none, %none)
  %seeds : Tensor = aten::expand(%seed, %tasks, %false)
  %g : Tensor = aten::mul(%seeds, %y)
  %kept : Tensor = aten::ones_like(%y, %none, %none, %none, %none, %none)
  %h : Tensor = aten::mul(%kept, %y)
  return (%g, %h)
)IR");
  torch::manual_seed(6);
  std::vector<c10::IValue> inputs = {Randn({4, 3}), Randn({4})};
  auto reference = RunPlain(graph->copy(), inputs);
  SpecializeShapes(graph, inputs);
  graph->lint();
  EXPECT_EQ(Count(*graph, "aten::mean"), 0u) << *graph;
  EXPECT_EQ(Count(*graph, "aten::sum"), 0u) << *graph;
  EXPECT_EQ(Count(*graph, "aten::ones"), 1u) << *graph;
  EXPECT_EQ(Count(*graph, "aten::ones_like"), 1u) << *graph;
  auto got = RunPlain(graph, inputs);
  ASSERT_EQ(got.size(), reference.size());
  for (size_t k = 0; k < got.size(); ++k) EXPECT_TRUE(torch::equal(got[k], reference[k]));
}

TEST(SpecializeShapes, ZerosLikeReadOnlyByAScatterBecomesZerosOfItsType) {
  // A pooling gradient's pattern: zeros_like(relu(x)) read by scatter_add
  // needs only the shape, so relu(x) dies. A zeros_like read by an
  // elementwise op, or of a transposed (non-contiguous) value, stays.
  auto graph = ParseGraph(R"IR(
graph(%x : Tensor, %index : Tensor, %src : Tensor, %b : Tensor):
  %one : int = prim::Constant[value=1]()
  %none : NoneType = prim::Constant()
  %zero : int = prim::Constant[value=0]()
  %r : Tensor = aten::relu(%x)
  %z : Tensor = aten::zeros_like(%r, %none, %none, %none, %none, %none)
  %s : Tensor = aten::scatter_add(%z, %one, %index, %src)
  %zb : Tensor = aten::zeros_like(%b, %none, %none, %none, %none, %none)
  %sum : Tensor = aten::add(%zb, %b, %one)
  %bt : Tensor = aten::t(%b)
  %zt : Tensor = aten::zeros_like(%bt, %none, %none, %none, %none, %none)
  %st : Tensor = aten::scatter_add(%zt, %zero, %index, %src)
  return (%s, %sum, %st)
)IR");
  torch::manual_seed(4);
  std::vector<c10::IValue> inputs = {Randn({3, 3}), torch::randint(0, 3, {3, 3}),
                                     Randn({3, 3}), Randn({3, 3})};
  auto reference = RunPlain(graph->copy(), inputs);
  ShapeSpecialization result = SpecializeShapes(graph, inputs);
  graph->lint();
  EXPECT_EQ(Count(*graph, "aten::relu"), 0u) << *graph;
  auto zeros = NodesOf(*graph, "aten::zeros");
  ASSERT_EQ(zeros.size(), 1u) << *graph;
  EXPECT_EQ(torch::jit::toIValue(zeros[0]->input(0))->toIntVector(), (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(NodesOf(*graph, "aten::scatter_add")[0]->input(0), zeros[0]->output()) << *graph;
  auto kept = NodesOf(*graph, "aten::zeros_like");
  ASSERT_EQ(kept.size(), 2u) << *graph;
  EXPECT_EQ(kept[0]->input(0), graph->inputs()[3]) << *graph;
  EXPECT_EQ(kept[1]->input(0)->node()->kind(), torch::jit::aten::t) << *graph;
  auto got = RunPlain(graph, inputs);
  ASSERT_EQ(got.size(), reference.size());
  for (size_t k = 0; k < got.size(); ++k) EXPECT_TRUE(torch::equal(got[k], reference[k]));
  for (size_t k = 0; k < got.size(); ++k) {
    EXPECT_TRUE(torch::equal(result.outputs[k].toTensor(), reference[k]));
  }
}

// ================================================================ FuseElementwise

TEST(FuseElementwise, ChainBecomesOneGroup) {
  const char* ir = R"IR(
graph(%x : Tensor, %y : Tensor):
  %one : int = prim::Constant[value=1]()
  %a : Tensor = aten::mul(%x, %y)
  %b : Tensor = aten::add(%a, %x, %one)
  %c : Tensor = aten::tanh(%b)
  %d : Tensor = aten::mul(%c, %y)
  return (%d)
)IR";
  torch::manual_seed(4);
  std::vector<c10::IValue> inputs = {Randn({3, 4}), Randn({3, 4})};
  Fused f = SpecializeAndFuse(ir, inputs);
  EXPECT_EQ(f.stats.groups, 1);
  EXPECT_EQ(f.stats.fused_nodes, 4);
  const Node* g = OnlyGroup(*f.graph);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(SubgraphOps(g), 4u) << *Sub(g);
  EXPECT_EQ(g->inputs().size(), 2u);
  EXPECT_EQ(g->outputs().size(), 1u);
  EXPECT_EQ(f.graph->outputs()[0], g->output(0));
  for (const char* kind : {"aten::mul", "aten::add", "aten::tanh"}) {
    EXPECT_EQ(Count(*f.graph, kind), 0u) << kind << "\n" << *f.graph;
  }
  FileCheck()
      .check("aten::mul")
      ->check("aten::add")
      ->check("aten::tanh")
      ->check("aten::mul")
      ->run(*Sub(g));
  ExpectFusedMatchesPlain(f, inputs);
}

TEST(FuseElementwise, BroadcastBiasExpandIsAbsorbedAsInnerAccess) {
  const char* ir = R"IR(
graph(%x : Tensor, %bias : Tensor):
  %one : int = prim::Constant[value=1]()
  %false : bool = prim::Constant[value=0]()
  %s : int[] = prim::Constant[value=[3, 4]]()
  %be : Tensor = aten::expand(%bias, %s, %false)
  %m : Tensor = aten::mul(%x, %x)
  %h : Tensor = aten::add(%m, %be, %one)
  %t : Tensor = aten::tanh(%h)
  return (%t)
)IR";
  torch::manual_seed(5);
  std::vector<c10::IValue> inputs = {Randn({3, 4}), Randn({4})};
  Fused f = SpecializeAndFuse(ir, inputs);
  const Node* g = OnlyGroup(*f.graph);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(Count(*f.graph, "aten::expand"), 0u) << *f.graph;
  EXPECT_EQ(Count(*Sub(g), "aten::expand"), 1u) << *Sub(g);
  // The group reads the [4] vector itself (and %x).
  ASSERT_EQ(g->inputs().size(), 2u) << *f.graph;
  const size_t b = g->input(0) == f.graph->inputs()[1] ? 0 : 1;
  EXPECT_EQ(g->input(b), f.graph->inputs()[1]) << *f.graph;
  EXPECT_EQ(g->input(1 - b), f.graph->inputs()[0]) << *f.graph;
  auto plan = LowerFusionGroup(g);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->loop_sizes, (std::vector<int64_t>{3, 4}));
  ASSERT_EQ(plan->kernel.inputs.size(), 2u);
  const kir::InputSpec& bias = plan->kernel.inputs[plan->binding[b]];
  EXPECT_EQ(bias.access, kir::Access::kInner);
  EXPECT_EQ(bias.inner, 4);
  EXPECT_EQ(plan->kernel.inputs[plan->binding[1 - b]].access, kir::Access::kElement);
  EXPECT_NE(kir::Print(plan->kernel).find("[i % inner] inner=4"), std::string::npos)
      << kir::Print(plan->kernel);
  ExpectFusedMatchesPlain(f, inputs);
}

TEST(FuseElementwise, SingleOpIsNotFused) {
  torch::manual_seed(6);
  // One add.
  Fused single = SpecializeAndFuse(R"IR(
graph(%x : Tensor, %y : Tensor):
  %one : int = prim::Constant[value=1]()
  %a : Tensor = aten::add(%x, %y, %one)
  return (%a)
)IR",
                                   {Randn({3, 4}), Randn({3, 4})});
  EXPECT_EQ(single.stats.groups, 0);
  EXPECT_EQ(Groups(*single.graph).size(), 0u) << *single.graph;
  EXPECT_EQ(Count(*single.graph, "aten::add"), 1u);
  // One add and the expand it reads: expand does not count.
  Fused with_expand = SpecializeAndFuse(R"IR(
graph(%x : Tensor, %bias : Tensor):
  %one : int = prim::Constant[value=1]()
  %false : bool = prim::Constant[value=0]()
  %s : int[] = prim::Constant[value=[3, 4]]()
  %be : Tensor = aten::expand(%bias, %s, %false)
  %a : Tensor = aten::add(%x, %be, %one)
  return (%a)
)IR",
                                        {Randn({3, 4}), Randn({4})});
  EXPECT_EQ(with_expand.stats.groups, 0);
  EXPECT_EQ(Groups(*with_expand.graph).size(), 0u) << *with_expand.graph;
  EXPECT_EQ(Count(*with_expand.graph, "aten::expand"), 1u);
  EXPECT_EQ(Count(*with_expand.graph, "aten::add"), 1u);
}

TEST(FuseElementwise, MiddleBroadcastIsAbsorbed) {
  // %w [3, 1, 5] broadcast into the [3, 4, 5] loop (a per-task bias over
  // rows): the kernel reads it with the middle access, so the whole chain
  // is one group reading %w itself.
  const char* ir = R"IR(
graph(%x : Tensor, %w : Tensor):
  %p : Tensor = aten::mul(%x, %x)
  %q : Tensor = aten::mul(%p, %w)
  %r : Tensor = aten::tanh(%q)
  %s : Tensor = aten::neg(%r)
  return (%s)
)IR";
  torch::manual_seed(7);
  std::vector<c10::IValue> inputs = {Randn({3, 4, 5}), Randn({3, 1, 5})};
  Fused f = SpecializeAndFuse(ir, inputs);
  const Node* g = OnlyGroup(*f.graph);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(SubgraphOps(g), 4u) << *Sub(g);
  EXPECT_EQ(Count(*Sub(g), "aten::mul"), 2u) << *Sub(g);
  EXPECT_EQ(Count(*f.graph, "aten::mul"), 0u) << *f.graph;
  bool reads_w = false;
  for (const Value* in : g->inputs()) reads_w = reads_w || in == f.graph->inputs()[1];
  EXPECT_TRUE(reads_w) << *f.graph;
  ExpectFusedMatchesPlain(f, inputs);

  // The same through an explicit expand: the expand and the exp before it
  // join the group too (exp runs per loop element on the middle read of
  // %w), and the group reads %w itself.
  const char* expanded_ir = R"IR(
graph(%x : Tensor, %w : Tensor):
  %false : bool = prim::Constant[value=0]()
  %s : int[] = prim::Constant[value=[3, 4, 5]]()
  %a : Tensor = aten::exp(%w)
  %e : Tensor = aten::expand(%a, %s, %false)
  %b : Tensor = aten::mul(%x, %e)
  %c : Tensor = aten::tanh(%b)
  return (%c)
)IR";
  Fused e = SpecializeAndFuse(expanded_ir, inputs);
  const Node* ge = OnlyGroup(*e.graph);
  ASSERT_NE(ge, nullptr);
  EXPECT_EQ(Count(*e.graph, "aten::expand"), 0u) << *e.graph;
  EXPECT_EQ(Count(*e.graph, "aten::exp"), 0u) << *e.graph;
  EXPECT_EQ(Count(*Sub(ge), "aten::exp"), 1u) << *Sub(ge);
  bool reads_w_itself = false;
  for (const Value* in : ge->inputs()) {
    reads_w_itself = reads_w_itself || in == e.graph->inputs()[1];
  }
  EXPECT_TRUE(reads_w_itself) << *e.graph;
  ExpectFusedMatchesPlain(e, inputs);
}

// %a = x * y, then `rest`: %a is read by an mm and by elementwise ops.
std::string MulThenMm(const std::string& rest) {
  return R"IR(
graph(%x : Tensor, %y : Tensor, %w : Tensor):
  %one : int = prim::Constant[value=1]()
  %a : Tensor = aten::mul(%x, %y)
)IR" + rest;
}

std::vector<c10::IValue> MmGraphInputs() {
  torch::manual_seed(8);
  return {Randn({3, 4}), Randn({3, 4}), Randn({4, 4})};
}

TEST(FuseElementwise, ProducerReadByMmBeforeGroupStaysOutside) {
  // %a is read by the mm, which comes before the group's position: putting
  // %a into the group would make the mm read a value defined after it.
  const auto inputs = MmGraphInputs();
  Fused f = SpecializeAndFuse(MulThenMm(R"IR(
  %m : Tensor = aten::mm(%a, %w)
  %b : Tensor = aten::add(%a, %m, %one)
  %c : Tensor = aten::tanh(%b)
  return (%c)
)IR"),
                              inputs);
  const Node* g = OnlyGroup(*f.graph);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(SubgraphOps(g), 2u) << *Sub(g);
  EXPECT_EQ(Count(*Sub(g), "aten::mul"), 0u) << *Sub(g);
  EXPECT_EQ(Count(*f.graph, "aten::mul"), 1u) << *f.graph;
  EXPECT_EQ(g->outputs().size(), 1u);
  FileCheck()
      .check("aten::mul")
      ->check("aten::mm")
      ->check("metafuse::FusionGroup")
      ->run(*f.graph);
  ExpectFusedMatchesPlain(f, inputs);
}

TEST(FuseElementwise, ProducerReadByMmAfterGroupBecomesSecondOutput) {
  const auto inputs = MmGraphInputs();
  Fused f = SpecializeAndFuse(MulThenMm(R"IR(
  %b : Tensor = aten::add(%a, %x, %one)
  %c : Tensor = aten::tanh(%b)
  %m : Tensor = aten::mm(%a, %w)
  return (%c, %m)
)IR"),
                              inputs);
  const Node* g = OnlyGroup(*f.graph);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(SubgraphOps(g), 3u) << *Sub(g);
  EXPECT_EQ(Count(*f.graph, "aten::mul"), 0u) << *f.graph;
  ASSERT_EQ(g->outputs().size(), 2u) << *f.graph;
  Node* mm = NodesOf(*f.graph, "aten::mm").at(0);
  EXPECT_EQ(mm->input(0)->node(), g) << *f.graph;
  EXPECT_EQ(f.graph->outputs()[0]->node(), g) << *f.graph;
  EXPECT_NE(mm->input(0), f.graph->outputs()[0]);
  EXPECT_TRUE(mm->isAfter(g));
  ExpectFusedMatchesPlain(f, inputs);
}

// relu's backward, g * (x > 0).type_as(g), returning `ret`.
std::string ReluBackward(const std::string& ret) {
  return R"IR(
graph(%x : Tensor, %g : Tensor):
  %zero : int = prim::Constant[value=0]()
  %mask : Tensor = aten::gt(%x, %zero)
  %mf : Tensor = aten::type_as(%mask, %g)
  %r : Tensor = aten::mul(%g, %mf)
  return ()IR" + ret + ")\n";
}

TEST(FuseElementwise, ReluBackwardFusesComparisonInside) {
  torch::manual_seed(10);
  std::vector<c10::IValue> inputs = {Randn({3, 4}), Randn({3, 4})};
  Fused f = SpecializeAndFuse(ReluBackward("%r"), inputs);
  const Node* g = OnlyGroup(*f.graph);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(Count(*f.graph, "aten::gt"), 0u) << *f.graph;
  EXPECT_EQ(Count(*f.graph, "aten::type_as"), 0u) << *f.graph;
  EXPECT_EQ(SubgraphOps(g), 3u) << *Sub(g);
  FileCheck().check("aten::gt")->check("aten::type_as")->check("aten::mul")->run(*Sub(g));
  // No bool tensor enters the kernel.
  for (const Value* in : g->inputs()) {
    auto t = CompleteTensorType(in);
    ASSERT_NE(t, nullptr);
    EXPECT_NE(*t->scalarType(), at::kBool);
  }
  auto plan = LowerFusionGroup(g);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_NE(kir::Print(plan->kernel).find("select.gt"), std::string::npos)
      << kir::Print(plan->kernel);
  ExpectFusedMatchesPlain(f, inputs);
}

TEST(FuseElementwise, TypeAsTakesItsDtypeFromATensorOfAnyShape) {
  // The mask's dtype comes from a [4] vector that does not broadcast to the
  // [2, 3, 5] loop: type_as never reads it, so the comparison and the cast
  // still fuse, and the vector is bound as a broadcast input.
  auto graph = R"IR(
graph(%x : Tensor, %g : Tensor, %like : Tensor):
  %zero : float = prim::Constant[value=0.]()
  %pos : Tensor = aten::gt(%x, %zero)
  %mask : Tensor = aten::type_as(%pos, %like)
  %y : Tensor = aten::mul(%g, %mask)
  return (%y)
)IR";
  torch::manual_seed(28);
  std::vector<c10::IValue> inputs = {Randn({2, 3, 5}), Randn({2, 3, 5}), Randn({4})};
  Fused f = SpecializeAndFuse(graph, inputs);
  const Node* g = OnlyGroup(*f.graph);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(Count(*f.graph, "aten::gt") + Count(*f.graph, "aten::type_as"), 0u) << *f.graph;
  auto plan = LowerFusionGroup(g);
  ASSERT_TRUE(plan.ok()) << plan.status();
  bool bound_as_broadcast = false;
  for (const kir::InputSpec& in : plan->kernel.inputs) {
    bound_as_broadcast |= in.access == kir::Access::kBroadcast;
  }
  EXPECT_TRUE(bound_as_broadcast) << kir::Print(plan->kernel);
  ExpectFusedMatchesPlain(f, inputs);
}

TEST(FuseElementwise, ComparisonReadOutsideIsDuplicated) {
  torch::manual_seed(11);
  std::vector<c10::IValue> inputs = {Randn({3, 4}), Randn({3, 4})};
  Fused f = SpecializeAndFuse(ReluBackward("%r, %mask"), inputs);
  const Node* g = OnlyGroup(*f.graph);
  ASSERT_NE(g, nullptr);
  // The original comparison stays for the returned mask, a copy is inside.
  auto gts = NodesOf(*f.graph, "aten::gt");
  ASSERT_EQ(gts.size(), 1u) << *f.graph;
  EXPECT_EQ(f.graph->outputs()[1], gts[0]->output()) << *f.graph;
  EXPECT_EQ(Count(*Sub(g), "aten::gt"), 1u) << *Sub(g);
  EXPECT_EQ(Count(*Sub(g), "aten::type_as"), 1u) << *Sub(g);
  EXPECT_EQ(g->outputs().size(), 1u) << *f.graph;
  for (const Value* in : g->inputs()) {
    EXPECT_NE(in, gts[0]->output()) << *f.graph;
    EXPECT_NE(*CompleteTensorType(in)->scalarType(), at::kBool);
  }
  EXPECT_EQ(f.graph->outputs()[0], g->output(0));
  auto got = RunFused(f.graph, inputs);
  auto want = RunPlain(f.original, inputs);
  ExpectAllClose({got[0]}, {want[0]});
  EXPECT_TRUE(torch::equal(got[1], want[1]));
}

// ================================================================ reduction epilogues

// BatchNorm's backward in small: per-channel sums of elementwise work on an
// NCHW value (sum_to_size and sum over dims), a mean over everything, and a
// value only a sum reads.
const char* kChannelSums = R"IR(
graph(%x : Tensor, %g : Tensor):
  %one : int = prim::Constant[value=1]()
  %two : float = prim::Constant[value=2.]()
  %false : bool = prim::Constant[value=0]()
  %none : NoneType = prim::Constant()
  %dims : int[] = prim::Constant[value=[0, 2, 3]]()
  %cs : int[] = prim::Constant[value=[1, 3, 1, 1]]()
  %y : Tensor = aten::mul(%x, %g)
  %y1 : Tensor = aten::add(%y, %x, %one)
  %p : Tensor = aten::mul(%y1, %x)
  %s_p : Tensor = aten::sum_to_size(%p, %cs)
  %s_y : Tensor = aten::sum(%y1, %dims, %false, %none)
  %m : Tensor = aten::mean(%y1, %none)
  %z : Tensor = aten::mul(%y1, %two)
  return (%z, %s_p, %s_y, %m)
)IR";

TEST(ReductionEpilogues, ChannelSumsRunInsideTheGroupThatMakesTheirInput) {
  // Planes of 9797 elements cross the launch's 8192-element blocks; 3 x 3
  // planes take the per-period path; both loops are long enough to run on
  // several threads.
  for (const std::vector<int64_t>& shape :
       std::vector<std::vector<int64_t>>{{2, 3, 97, 101}, {1500, 3, 3, 3}, {4, 3, 30, 30}}) {
    torch::manual_seed(21);
    std::vector<c10::IValue> inputs = {Randn(shape), Randn({1, 3, 1, 1})};
    Fused f = SpecializeAndFuse(kChannelSums, inputs);
    Node* group = OnlyGroup(*f.graph);
    ASSERT_NE(group, nullptr);
    EXPECT_EQ(f.stats.reductions, 3);
    EXPECT_EQ(Count(*f.graph, "aten::sum_to_size") + Count(*f.graph, "aten::sum") +
                  Count(*f.graph, "aten::mean"),
              0u)
        << *f.graph;
    // Outputs: z, then p (read by its sum alone: scratch), then the three sums.
    ASSERT_EQ(group->outputs().size(), 5u) << *f.graph;
    EXPECT_EQ(group->i(ScratchAttr()), 1);
    EXPECT_FALSE(group->output(1)->hasUses());
    // sum_to_size and sum over (0, 2, 3): per channel (periodic access, plane
    // inner, 3 channels); the mean: everything, scaled by 1 / numel.
    const int64_t plane = shape[2] * shape[3];
    // In the order of their sources: y1's sum and mean, then p's sum_to_size.
    const int64_t periodic = static_cast<int64_t>(kir::Access::kPeriodic);
    const int64_t all = static_cast<int64_t>(kir::Access::kBroadcast);
    EXPECT_EQ(group->is(ReduceAttr()),
              (std::vector<int64_t>{0, periodic, plane, 3, 0, all, 1, 1, 1, periodic, plane, 3}))
        << *f.graph;
    EXPECT_EQ(group->fs(ReduceScaleAttr()),
              (std::vector<double>{1.0, 1.0 / (shape[0] * 3 * plane), 1.0}));
    for (int threads : {1, 2}) {
      at::set_num_threads(threads);
      ExpectFusedMatchesPlain(f, inputs, 1e-13);
    }
    at::set_num_threads(1);
  }
}

TEST(ReductionEpilogues, RowColumnAndPerTaskSumsOfMatrices) {
  // [M, C] -> [C] (inner), [M, 1] (outer); [T, R, C] -> [T, 1, C] (middle).
  auto graph = R"IR(
graph(%a : Tensor, %b : Tensor, %t : Tensor):
  %one : int = prim::Constant[value=1]()
  %true : bool = prim::Constant[value=1]()
  %none : NoneType = prim::Constant()
  %rows : int[] = prim::Constant[value=[300]]()
  %cols : int[] = prim::Constant[value=[1]]()
  %mid : int[] = prim::Constant[value=[1]]()
  %y : Tensor = aten::mul(%a, %b)
  %e : Tensor = aten::exp(%y)
  %r : Tensor = aten::sum_to_size(%e, %rows)
  %c : Tensor = aten::sum(%e, %cols, %true, %none)
  %u : Tensor = aten::mul(%t, %t)
  %v : Tensor = aten::neg(%u)
  %w : Tensor = aten::sum(%v, %mid, %true, %none)
  return (%r, %c, %w)
)IR";
  torch::manual_seed(22);
  std::vector<c10::IValue> inputs = {Randn({200, 300}), Randn({200, 300}), Randn({7, 60, 50})};
  Fused f = SpecializeAndFuse(graph, inputs);
  auto groups = Groups(*f.graph);
  ASSERT_EQ(groups.size(), 2u) << *f.graph;
  EXPECT_EQ(f.stats.reductions, 3);
  for (Node* g : groups) EXPECT_EQ(g->i(ScratchAttr()), 1) << *f.graph;
  for (int threads : {1, 2}) {
    at::set_num_threads(threads);
    ExpectFusedMatchesPlain(f, inputs, 1e-13);
  }
  at::set_num_threads(1);
}

TEST(ReductionEpilogues, DimsBuiltByAListConstructAsTheTracerRecordsThem) {
  // x.sum(dim=(0, 2, 3), keepdim=True) traced: the dims are a ListConstruct
  // of int constants, not one list constant. It was left to ATen.
  auto graph = R"IR(
graph(%x : Tensor, %g : Tensor):
  %zero : int = prim::Constant[value=0]()
  %two : int = prim::Constant[value=2]()
  %three : int = prim::Constant[value=3]()
  %true : bool = prim::Constant[value=1]()
  %none : NoneType = prim::Constant()
  %dims : int[] = prim::ListConstruct(%zero, %two, %three)
  %y : Tensor = aten::mul(%x, %g)
  %e : Tensor = aten::exp(%y)
  %s : Tensor = aten::sum(%e, %dims, %true, %none)
  %m : Tensor = aten::mean(%y, %dims, %true, %none)
  return (%e, %s, %m)
)IR";
  torch::manual_seed(23);
  std::vector<c10::IValue> inputs = {Randn({4, 3, 30, 30}), Randn({1, 3, 1, 1})};
  Fused f = SpecializeAndFuse(graph, inputs);
  ASSERT_NE(OnlyGroup(*f.graph), nullptr) << *f.graph;
  EXPECT_EQ(f.stats.reductions, 2) << *f.graph;
  EXPECT_EQ(Count(*f.graph, "aten::sum") + Count(*f.graph, "aten::mean"), 0u) << *f.graph;
  ExpectFusedMatchesPlain(f, inputs, 1e-13);
}

TEST(ReductionEpilogues, ASumIsNeverInsideTheGroupThatReadsItNorWhenDisabled) {
  // s is read by z: it must be complete before z's loop runs, so it cannot
  // join z's group; it joins the group of its source y (mul) instead, which
  // keeps y whole (z reads it too).
  const std::string ir = R"IR(
graph(%x : Tensor):
  %two : float = prim::Constant[value=2.]()
  %none : NoneType = prim::Constant()
  %y : Tensor = aten::mul(%x, %two)
  %s : Tensor = aten::sum(%y, %none)
  %z : Tensor = aten::mul(%y, %s)
  %w : Tensor = aten::neg(%z)
  return (%w)
)IR";
  torch::manual_seed(23);
  std::vector<c10::IValue> inputs = {Randn({100, 100})};
  Fused f = SpecializeAndFuse(ir, inputs);
  EXPECT_EQ(f.stats.reductions, 1);
  EXPECT_EQ(Count(*f.graph, "aten::sum"), 0u) << *f.graph;
  auto groups = Groups(*f.graph);
  ASSERT_EQ(groups.size(), 2u) << *f.graph;
  ASSERT_TRUE(groups[0]->hasAttribute(ReduceAttr())) << *f.graph;
  EXPECT_EQ(groups[0]->i(ScratchAttr()), 0);
  EXPECT_FALSE(groups[1]->hasAttribute(ReduceAttr())) << *f.graph;
  EXPECT_EQ(groups[1]->input(0), groups[0]->output(0)) << *f.graph;
  EXPECT_EQ(groups[1]->input(1), groups[0]->output(1)) << *f.graph;
  ExpectFusedMatchesPlain(f, inputs, 1e-13);

  // The switch (METAFUSE_DISABLE_REDUCTION_FUSION) leaves every sum outside.
  auto graph = ParseGraph(kChannelSums);
  std::vector<c10::IValue> channel_inputs = {Randn({4, 3, 30, 30}), Randn({1, 3, 1, 1})};
  SpecializeShapes(graph, channel_inputs);
  FusionStats stats = FuseElementwise(graph, /*fuse_reductions=*/false);
  EXPECT_EQ(stats.reductions, 0);
  EXPECT_EQ(Count(*graph, "aten::sum_to_size"), 1u) << *graph;
  for (Node* g : Groups(*graph)) EXPECT_FALSE(g->hasAttribute(ReduceAttr())) << *graph;

  // Loops under 8192 elements keep their sums apart (as fast, and a
  // summing launch costs a little more).
  Fused small = SpecializeAndFuse(kChannelSums, {Randn({2, 3, 4, 5}), Randn({1, 3, 1, 1})});
  EXPECT_EQ(small.stats.reductions, 0);
  EXPECT_EQ(Count(*small.graph, "aten::sum_to_size"), 1u) << *small.graph;
}

TEST(ReductionEpilogues, LaunchPlansRoundTripThroughTheProgramFormat) {
  torch::manual_seed(24);
  std::vector<c10::IValue> inputs = {Randn({4, 3, 30, 30}), Randn({1, 3, 1, 1})};
  Fused f = SpecializeAndFuse(kChannelSums, inputs);
  runtime::CompiledProgram value;
  value.forward = LowerToProgram(*f.graph, "forward", {.plain_reductions = true});
  value.backward = value.forward;
  value.num_inputs = 2;
  value.num_outputs = 4;
  ASSERT_EQ(value.forward.launches.size(), 1u);
  ASSERT_EQ(value.forward.launches[0].reductions.size(), 3u);
  EXPECT_EQ(value.forward.launches[0].scratch, 1);
  const std::string bytes = runtime::SerializeProgram(value);
  auto loaded = runtime::DeserializeProgram(bytes);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(runtime::Dump(*loaded), runtime::Dump(value));
  EXPECT_NE(runtime::Dump(value).find(" sum(out 1, access 5, inner 900, mid 3, scale 1) -> [1, 3, 1, 1]"),
            std::string::npos)
      << runtime::Dump(value);
  const auto& red = loaded->forward.launches[0].reductions;
  ASSERT_EQ(red.size(), 3u);
  EXPECT_EQ(red[1].scale, 1.0 / 10800);
  EXPECT_EQ(red[0].out_sizes, (std::vector<int64_t>{3}));
  EXPECT_EQ(red[2].out_sizes, (std::vector<int64_t>{1, 3, 1, 1}));
  ExpectAllClose(Tensors(runtime::Program(loaded->forward).Run(inputs)),
                 RunPlain(f.original, inputs), 1e-12, 1e-13);
}

// ================================================================ FusePoolEpilogues

// BatchNorm's affine and ReLU, then a 2x2 max-pool (odd sizes: the last
// row and column are not pooled), as a conv net's layer.
constexpr const char* kAffineReluPool = R"IR(
graph(%x : Tensor, %scale : Tensor, %shift : Tensor):
  %one : int = prim::Constant[value=1]()
  %zero : int = prim::Constant[value=0]()
  %false : bool = prim::Constant[value=0]()
  %two : int = prim::Constant[value=2]()
  %k : int[] = prim::ListConstruct(%two, %two)
  %none : int[] = prim::ListConstruct()
  %pad : int[] = prim::ListConstruct(%zero, %zero)
  %dil : int[] = prim::ListConstruct(%one, %one)
  %a : Tensor = aten::mul(%x, %scale)
  %b : Tensor = aten::add(%a, %shift, %one)
  %r : Tensor = aten::relu(%b)
  %v : Tensor, %i : Tensor = aten::max_pool2d_with_indices(%r, %k, %none, %pad, %dil, %false)
  return (%v, %i)
)IR";

std::vector<c10::IValue> AffineReluPoolInputs(c10::ScalarType dtype) {
  torch::manual_seed(31);
  auto opts = torch::TensorOptions().dtype(dtype);
  // Ties (ReLU zeros) in most windows: indices must follow ATen's first maximum.
  return {torch::randn({3, 5, 9, 11}, opts), torch::randn({1, 5, 1, 1}, opts),
          torch::randn({1, 5, 1, 1}, opts) - 1};
}

TEST(FusePoolEpilogues, AffineReluPoolRunsInTheKernelWithAtensValuesAndIndices) {
  for (c10::ScalarType dtype : {at::kFloat, at::kDouble}) {
    auto inputs = AffineReluPoolInputs(dtype);
    Fused f = SpecializeAndFuse(kAffineReluPool, inputs);
    ASSERT_EQ(FusePoolEpilogues(f.graph), 1) << *f.graph;
    f.graph->lint();
    const Node* g = OnlyGroup(*f.graph);
    ASSERT_NE(g, nullptr);
    EXPECT_EQ(g->is(PoolAttr()), (std::vector<int64_t>{2, 2}));
    EXPECT_EQ(Count(*f.graph, "aten::max_pool2d_with_indices"), 0u) << *f.graph;
    EXPECT_EQ(PlanBuffers(f.graph), 0);  // the pooled output is never a buffer
    const auto got = RunFused(f.graph, inputs);
    const auto want = RunPlain(f.original, inputs);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_TRUE(torch::equal(got[0], want[0])) << got[0] << want[0];
    EXPECT_TRUE(torch::equal(got[1], want[1])) << got[1] << want[1];
  }
}

TEST(FusePoolEpilogues, PoolsTheRuntimeKernelsDoNotComputeStayAsTheyAre) {
  auto inputs = AffineReluPoolInputs(at::kFloat);
  // Stride 1 (overlapping windows), and a ReLU output read by something else.
  std::string strided = kAffineReluPool;
  strided.replace(strided.find("%none, %pad"), 5, "%dil");
  Fused f = SpecializeAndFuse(strided, inputs);
  EXPECT_EQ(FusePoolEpilogues(f.graph), 0) << *f.graph;
  std::string shared = kAffineReluPool;
  shared.replace(shared.find("return (%v, %i)"), 15, "return (%v, %i, %r)");
  Fused h = SpecializeAndFuse(shared, inputs);
  EXPECT_EQ(FusePoolEpilogues(h.graph), 0) << *h.graph;
  ExpectFusedMatchesPlain(h, inputs);
}

TEST(FusePoolEpilogues, PooledLaunchPlansRoundTripThroughTheProgramFormat) {
  auto inputs = AffineReluPoolInputs(at::kFloat);
  Fused f = SpecializeAndFuse(kAffineReluPool, inputs);
  ASSERT_EQ(FusePoolEpilogues(f.graph), 1);
  runtime::CompiledProgram value;
  value.forward = LowerToProgram(*f.graph, "forward", {.plain_reductions = true});
  value.backward = value.forward;
  value.num_inputs = 3;
  value.num_outputs = 2;
  ASSERT_EQ(value.forward.launches.size(), 1u);
  EXPECT_EQ(value.forward.launches[0].pool, (std::vector<int64_t>{2, 2}));
  auto loaded = runtime::DeserializeProgram(runtime::SerializeProgram(value));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(runtime::Dump(*loaded), runtime::Dump(value));
  EXPECT_NE(runtime::Dump(value).find(" max_pool [2, 2]"), std::string::npos)
      << runtime::Dump(value);
  const auto got = Tensors(runtime::Program(loaded->forward).Run(inputs));
  const auto want = RunPlain(f.original, inputs);
  EXPECT_TRUE(torch::equal(got[0], want[0]));
  EXPECT_TRUE(torch::equal(got[1], want[1]));
}

// ================================================================ MergeFusionGroups

// Two [4, 3, 30, 30] activations and a per-channel vector: loops above the
// merge threshold.
std::vector<c10::IValue> ActivationsAndChannels(uint64_t seed) {
  torch::manual_seed(seed);
  return {Randn({4, 3, 30, 30}), Randn({4, 3, 30, 30}), Randn({1, 3, 1, 1})};
}

// `f` fused into two groups, then merged into one: `*merged`.
void MergeTheTwoGroups(const Fused& f, Node** merged) {
  ASSERT_EQ(Groups(*f.graph).size(), 2u) << *f.graph;
  EXPECT_EQ(MergeFusionGroups(f.graph), 1);
  f.graph->lint();
  *merged = OnlyGroup(*f.graph);
  ASSERT_NE(*merged, nullptr);
}

TEST(MergeFusionGroups, ASiblingGroupFoldsIntoTheGroupThatReadsIt) {
  // d feeds both e (summed only) and the chain f, h: vertical fusion makes
  // {d, e} (summing d and e) and {f, h} reading d. Merged, d and e are never
  // written whole.
  const std::string ir = R"IR(
graph(%x : Tensor, %m : Tensor, %g : Tensor):
  %one : int = prim::Constant[value=1]()
  %cs : int[] = prim::Constant[value=[1, 3, 1, 1]]()
  %d : Tensor = aten::mul(%x, %m)
  %s1 : Tensor = aten::sum_to_size(%d, %cs)
  %e : Tensor = aten::mul(%d, %x)
  %s2 : Tensor = aten::sum_to_size(%e, %cs)
  %f : Tensor = aten::mul(%d, %g)
  %h : Tensor = aten::add(%f, %x, %one)
  return (%h, %s1, %s2)
)IR";
  std::vector<c10::IValue> inputs = ActivationsAndChannels(25);
  Fused f = SpecializeAndFuse(ir, inputs);
  Node* merged = nullptr;
  MergeTheTwoGroups(f, &merged);
  ASSERT_NE(merged, nullptr);
  // h whole; d and e scratch; the two sums.
  ASSERT_EQ(merged->outputs().size(), 5u) << *f.graph;
  EXPECT_EQ(merged->i(ScratchAttr()), 2);
  EXPECT_EQ(merged->fs(ReduceScaleAttr()).size(), 2u);
  EXPECT_EQ(f.graph->outputs()[0], merged->output(0)) << *f.graph;
  EXPECT_EQ(f.graph->outputs()[1], merged->output(3)) << *f.graph;
  EXPECT_EQ(f.graph->outputs()[2], merged->output(4)) << *f.graph;
  ExpectFusedMatchesPlain(f, inputs, 1e-13);

  // Under 8192 elements the groups stay apart.
  Fused small = SpecializeAndFuse(ir, {Randn({2, 3, 4, 4}), Randn({2, 3, 4, 4}),
                                       Randn({1, 3, 1, 1})});
  EXPECT_EQ(MergeFusionGroups(small.graph), 0);
}

TEST(MergeFusionGroups, AReaderBetweenTheGroupsMovesAfterTheMergedOne) {
  // max(d) sits between {d, e} and {f, h}: after the merge it reads an
  // output of the merged node, so it moves after it; d stays whole for it.
  const std::string ir = R"IR(
graph(%x : Tensor, %m : Tensor, %g : Tensor):
  %one : int = prim::Constant[value=1]()
  %cs : int[] = prim::Constant[value=[1, 3, 1, 1]]()
  %d : Tensor = aten::mul(%x, %m)
  %e : Tensor = aten::mul(%d, %x)
  %s2 : Tensor = aten::sum_to_size(%e, %cs)
  %mx : Tensor = aten::max(%d)
  %f : Tensor = aten::mul(%d, %g)
  %h : Tensor = aten::add(%f, %x, %one)
  return (%h, %s2, %mx)
)IR";
  std::vector<c10::IValue> inputs = ActivationsAndChannels(27);
  Fused f = SpecializeAndFuse(ir, inputs);
  Node* merged = nullptr;
  MergeTheTwoGroups(f, &merged);
  ASSERT_NE(merged, nullptr);
  Node* max = NodesOf(*f.graph, "aten::max").at(0);
  EXPECT_TRUE(max->isAfter(merged)) << *f.graph;
  EXPECT_EQ(max->input(0)->node(), merged) << *f.graph;
  ExpectFusedMatchesPlain(f, inputs, 1e-13);
}

TEST(MergeFusionGroups, AGroupReadingASumOfItsProducerStaysApart) {
  const std::string ir = R"IR(
graph(%x : Tensor, %m : Tensor):
  %none : NoneType = prim::Constant()
  %d : Tensor = aten::mul(%x, %m)
  %s : Tensor = aten::sum(%d, %none)
  %f : Tensor = aten::mul(%d, %s)
  %h : Tensor = aten::neg(%f)
  return (%h)
)IR";
  torch::manual_seed(26);
  std::vector<c10::IValue> inputs = {Randn({100, 100}), Randn({100, 100})};
  Fused f = SpecializeAndFuse(ir, inputs);
  ASSERT_EQ(Groups(*f.graph).size(), 2u) << *f.graph;
  EXPECT_EQ(MergeFusionGroups(f.graph), 0);
  EXPECT_EQ(Groups(*f.graph).size(), 2u) << *f.graph;
  ExpectFusedMatchesPlain(f, inputs, 1e-13);
}

// ================================================================ FuseHorizontally

// %n<k> = %p<k> - 0.1 * %<g>: a mul and a sub, one two-op group.
std::string Update(int k, const std::string& g) {
  const std::string n = std::to_string(k);
  return "  %u" + n + " : Tensor = aten::mul(%" + g + ", %lr)\n  %n" + n +
         " : Tensor = aten::sub(%p" + n + ", %u" + n + ", %one)\n";
}

// A graph of tensor inputs `params` with the constants %lr = 0.1, %one = 1,
// %none, then `body` and `return (<ret>)`.
std::string UpdateGraph(const std::vector<std::string>& params, const std::string& body,
                        const std::string& ret) {
  std::string ir = "graph(";
  for (size_t k = 0; k < params.size(); ++k) ir += (k ? ", %" : "%") + params[k] + " : Tensor";
  return ir + "):\n  %lr : float = prim::Constant[value=0.1]()\n" +
         "  %one : int = prim::Constant[value=1]()\n  %none : NoneType = prim::Constant()\n" +
         body + "  return (" + ret + ")\n";
}

// p_i - 0.1 * g_i for i = 0, 1, 2, each its own group.
std::string ThreeUpdates() {
  return UpdateGraph({"p0", "g0", "p1", "g1", "p2", "g2"},
                     Update(0, "g0") + Update(1, "g1") + Update(2, "g2"), "%n0, %n1, %n2");
}

// Update 1 reads update 0's result %n0 directly; the max of %n0, between
// the two, keeps vertical fusion from joining them (a sum would not: it
// would run inside the group). Then `more`.
std::string DependentUpdates(const std::vector<std::string>& more_params,
                             const std::string& more, const std::string& ret) {
  std::vector<std::string> params = {"p0", "g0", "p1"};
  params.insert(params.end(), more_params.begin(), more_params.end());
  return UpdateGraph(params,
                     Update(0, "g0") + "  %s0 : Tensor = aten::max(%n0)\n" +
                         Update(1, "n0") + more,
                     ret);
}

// `ir` specialized to `inputs` and fused vertically into `vertical` groups,
// then horizontally into `merged` nodes absorbing `segments` of them; the
// result is a valid graph.
Fused FuseBothWays(const std::string& ir, const std::vector<c10::IValue>& inputs,
                   size_t vertical, int64_t merged, int64_t segments) {
  Fused f = SpecializeAndFuse(ir, inputs);
  EXPECT_EQ(Groups(*f.graph).size(), vertical) << *f.graph;
  HorizontalFusionStats stats = FuseHorizontally(f.graph);
  f.graph->lint();
  EXPECT_EQ(stats.merged_nodes, merged) << *f.graph;
  EXPECT_EQ(stats.segments, segments) << *f.graph;
  return f;
}

std::vector<c10::IValue> ThreeUpdateInputs() {
  torch::manual_seed(12);
  return {Randn({3}), Randn({3}), Randn({2, 5}), Randn({2, 5}), Randn({4, 4}), Randn({4, 4})};
}

TEST(FuseHorizontally, IndependentUpdatesOfDifferentSizesMerge) {
  auto inputs = ThreeUpdateInputs();
  Fused f = FuseBothWays(ThreeUpdates(), inputs, 3, 1, 3);
  Node* merged = OnlyGroup(*f.graph);
  ASSERT_NE(merged, nullptr);
  ASSERT_TRUE(merged->hasAttribute(SegmentsAttr()));
  EXPECT_EQ(merged->i(SegmentsAttr()), 3);
  ASSERT_EQ(merged->inputs().size(), 6u);
  ASSERT_EQ(merged->outputs().size(), 3u);
  // Segment s reads (g_s, p_s) and gives n_s; every use is rewired.
  const std::vector<std::vector<int64_t>> sizes = {{3}, {2, 5}, {4, 4}};
  for (size_t s = 0; s < 3; ++s) {
    EXPECT_EQ(merged->input(2 * s), f.graph->inputs()[2 * s + 1]) << s;
    EXPECT_EQ(merged->input(2 * s + 1), f.graph->inputs()[2 * s]) << s;
    EXPECT_EQ(f.graph->outputs()[s], merged->output(s)) << s;
    EXPECT_EQ(*CompleteTensorType(merged->output(s))->sizes().concrete_sizes(), sizes[s]);
  }
  EXPECT_EQ(Count(*f.graph, "aten::mul"), 0u);
  EXPECT_EQ(Count(*f.graph, "aten::sub"), 0u);
  ExpectFusedMatchesPlain(f, inputs);
}

TEST(FuseHorizontally, DependentGroupsAreNotMerged) {
  const std::string ir = DependentUpdates({}, "", "%n1, %s0");
  torch::manual_seed(13);
  std::vector<c10::IValue> inputs = {Randn({5}), Randn({5}), Randn({5})};
  Fused f = SpecializeAndFuse(ir, inputs);
  auto before = Groups(*f.graph);
  ASSERT_EQ(before.size(), 2u) << *f.graph;
  // Same kernel: only the dependence keeps them apart.
  auto k0 = LowerFusionGroup(before[0]), k1 = LowerFusionGroup(before[1]);
  ASSERT_TRUE(k0.ok() && k1.ok());
  EXPECT_EQ(kir::Print(k0->kernel), kir::Print(k1->kernel));
  EXPECT_EQ(before[1]->input(0), before[0]->output(0)) << *f.graph;

  HorizontalFusionStats stats = FuseHorizontally(f.graph);
  f.graph->lint();
  EXPECT_EQ(stats.merged_nodes, 0);
  auto after = Groups(*f.graph);
  ASSERT_EQ(after.size(), 2u) << *f.graph;
  for (const Node* g : after) EXPECT_FALSE(g->hasAttribute(SegmentsAttr()));
  ExpectFusedMatchesPlain(f, inputs);
}

TEST(FuseHorizontally, ABucketStopsAtTheFirstReaderOfAMember) {
  // A, max(A), B (reads A), C (independent), all one kernel but max. A's
  // output is read before B and C, so A stays alone (merging it with C
  // would move A past its readers, or C before its place); B and C, read
  // by nothing before C, merge into one node in C's place.
  const std::string ir = DependentUpdates({"p2", "g2"}, Update(2, "g2"), "%n1, %s0, %n2");
  torch::manual_seed(14);
  std::vector<c10::IValue> inputs = {Randn({5}), Randn({5}), Randn({5}), Randn({2, 3}),
                                     Randn({2, 3})};
  Fused f = FuseBothWays(ir, inputs, 3, 1, 2);
  auto groups = Groups(*f.graph);
  ASSERT_EQ(groups.size(), 2u) << *f.graph;
  EXPECT_FALSE(groups[0]->hasAttribute(SegmentsAttr())) << *f.graph;
  ASSERT_TRUE(groups[1]->hasAttribute(SegmentsAttr())) << *f.graph;
  EXPECT_EQ(groups[1]->i(SegmentsAttr()), 2);
  EXPECT_EQ(groups[1]->input(0), groups[0]->output(0)) << *f.graph;  // B's read of A
  // The max still reads A before the merged node, which comes last.
  Node* max = NodesOf(*f.graph, "aten::max").at(0);
  EXPECT_TRUE(max->isBefore(groups[1])) << *f.graph;
  for (Node* node : f.graph->nodes()) {
    for (Value* in : node->inputs()) {
      if (in->node()->kind() != torch::jit::prim::Param) {
        EXPECT_TRUE(in->node()->isBefore(node));
      }
    }
  }
  ExpectFusedMatchesPlain(f, inputs);
}

TEST(FuseHorizontally, GroupsEachReadBeforeTheNextStayApart) {
  // Three independent updates, each read (by a max) before the next one
  // runs: the time steps of an unrolled recurrence. Merging them would
  // compute the later ones at the first max and keep their outputs alive
  // until their own readers.
  const std::string ir = UpdateGraph(
      {"p0", "g0", "p1", "g1", "p2", "g2"},
      Update(0, "g0") + "  %s0 : Tensor = aten::max(%n0)\n" + Update(1, "g1") +
          "  %s1 : Tensor = aten::max(%n1)\n" + Update(2, "g2") +
          "  %s2 : Tensor = aten::max(%n2)\n",
      "%s0, %s1, %s2");
  auto inputs = ThreeUpdateInputs();
  Fused f = FuseBothWays(ir, inputs, 3, 0, 0);
  for (const Node* g : Groups(*f.graph)) EXPECT_FALSE(g->hasAttribute(SegmentsAttr()));
  ExpectFusedMatchesPlain(f, inputs);
}

TEST(FuseHorizontally, BroadcastGroupsMergeOnlyWithTheSameKernel) {
  // tanh(x_i + b_i) with a row bias: the kernel reads b_i as [i % inner],
  // so the groups with a [4] bias (rows of 3 and of 7) share a kernel and
  // the one with a [5] bias does not.
  const char* ir = R"IR(
graph(%x0 : Tensor, %b0 : Tensor, %x1 : Tensor, %b1 : Tensor, %x2 : Tensor, %b2 : Tensor):
  %one : int = prim::Constant[value=1]()
  %h0 : Tensor = aten::add(%x0, %b0, %one)
  %t0 : Tensor = aten::tanh(%h0)
  %h1 : Tensor = aten::add(%x1, %b1, %one)
  %t1 : Tensor = aten::tanh(%h1)
  %h2 : Tensor = aten::add(%x2, %b2, %one)
  %t2 : Tensor = aten::tanh(%h2)
  return (%t0, %t1, %t2)
)IR";
  torch::manual_seed(24);
  std::vector<c10::IValue> inputs = {Randn({3, 4}), Randn({4}), Randn({2, 5}), Randn({5}),
                                     Randn({7, 4}), Randn({4})};
  Fused f = FuseBothWays(ir, inputs, 3, 1, 2);
  auto groups = Groups(*f.graph);
  ASSERT_EQ(groups.size(), 2u) << *f.graph;
  const Node* merged = nullptr;
  const Node* single = nullptr;
  for (const Node* g : groups) (g->hasAttribute(SegmentsAttr()) ? merged : single) = g;
  ASSERT_NE(merged, nullptr) << *f.graph;
  ASSERT_NE(single, nullptr) << *f.graph;
  EXPECT_EQ(merged->i(SegmentsAttr()), 2);
  EXPECT_EQ(merged->output(0), f.graph->outputs()[0]);
  EXPECT_EQ(merged->output(1), f.graph->outputs()[2]);
  EXPECT_EQ(single->output(0), f.graph->outputs()[1]);
  ExpectFusedMatchesPlain(f, inputs);
}

TEST(FuseHorizontally, RuntimeScalarIsBoundPerSegment) {
  // The learning rates are graph inputs (numbers), not constants: one
  // kernel with a scalar parameter, given each segment's own rate.
  const char* ir = R"IR(
graph(%p0 : Tensor, %g0 : Tensor, %lr0 : float, %p1 : Tensor, %g1 : Tensor, %lr1 : float):
  %one : int = prim::Constant[value=1]()
  %u0 : Tensor = aten::mul(%g0, %lr0)
  %n0 : Tensor = aten::sub(%p0, %u0, %one)
  %u1 : Tensor = aten::mul(%g1, %lr1)
  %n1 : Tensor = aten::sub(%p1, %u1, %one)
  return (%n0, %n1)
)IR";
  torch::manual_seed(25);
  std::vector<c10::IValue> inputs = {Randn({3}), Randn({3}), 0.5, Randn({2, 2}), Randn({2, 2}),
                                     -3.0};
  Fused f = FuseBothWays(ir, inputs, 2, 1, 2);
  const Node* g = OnlyGroup(*f.graph);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->i(SegmentsAttr()), 2);
  auto plan = LowerFusionGroup(g);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->kernel.scalars.size(), 1u) << kir::Print(plan->kernel);
  PlanBuffers(f.graph);
  ExpectFusedMatchesPlain(f, inputs);
}

TEST(ReorderTopologically, MovesUsersAfterDefinitionsKeepingOrder) {
  auto graph = ParseGraph(R"IR(
graph(%x : Tensor):
  %a : Tensor = aten::exp(%x)
  %b : Tensor = aten::neg(%a)
  %c : Tensor = aten::tanh(%x)
  return (%b, %c)
)IR");
  Node* exp = NodesOf(*graph, "aten::exp").at(0);
  exp->moveBefore(graph->return_node());  // now after its user
  ReorderTopologically(graph->block());
  graph->lint();
  std::vector<std::string> order;
  for (Node* node : graph->nodes()) order.push_back(node->kind().toQualString());
  EXPECT_EQ(order, (std::vector<std::string>{"aten::tanh", "aten::exp", "aten::neg"}));
}

// ================================================================ PlanBuffers

// `ir` specialized to `inputs` and fused gives one group; PlanBuffers plans
// `planned` reuses and sets its attr `reuse`; the planned graph computes what
// the graph before does, without touching the caller's inputs.
void ExpectPlan(const std::string& ir, const std::vector<c10::IValue>& inputs,
                int64_t planned, const std::vector<int64_t>& reuse) {
  Fused f = SpecializeAndFuse(ir, inputs);
  const Node* g = OnlyGroup(*f.graph);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(PlanBuffers(f.graph), planned) << *f.graph;
  EXPECT_EQ(Reuse(g), reuse) << *f.graph;
  ExpectFusedMatchesPlain(f, inputs);
}

// mm -> (* 2, exp), then `tail`: the group reads only the mm's result.
std::string MmThenGroup(const std::string& tail) {
  return R"IR(
graph(%x : Tensor, %w : Tensor):
  %two : float = prim::Constant[value=2.]()
  %a : Tensor = aten::mm(%x, %w)
  %b : Tensor = aten::mul(%a, %two)
  %c : Tensor = aten::exp(%b)
)IR" + tail;
}

std::vector<c10::IValue> MmInputs(uint64_t seed) {
  torch::manual_seed(seed);
  return {Randn({3, 4}), Randn({4, 4})};
}

TEST(PlanBuffers, DyingSameShapeInputIsReused) {
  ExpectPlan(MmThenGroup("  return (%c)\n"), MmInputs(15), 1, {0});
}

TEST(PlanBuffers, InputUsedLaterIsNotReused) {
  ExpectPlan(MmThenGroup("  %d : Tensor = aten::mm(%a, %w)\n  return (%c, %d)\n"),
             MmInputs(16), 0, {-1});
}

TEST(PlanBuffers, InputReadBeforeByAnotherNodeIsReused) {
  // BatchNorm's centering: the mean of %a reads it first, the group last.
  ExpectPlan(R"IR(
graph(%x : Tensor, %w : Tensor):
  %none : NoneType = prim::Constant()
  %false : bool = prim::Constant[value=0]()
  %zero : int = prim::Constant[value=0]()
  %one : int = prim::Constant[value=1]()
  %dims : int[] = prim::ListConstruct(%zero)
  %a : Tensor = aten::mm(%x, %w)
  %m : Tensor = aten::mean(%a, %dims, %false, %none)
  %b : Tensor = aten::sub(%a, %m, %one)
  %c : Tensor = aten::exp(%b)
  return (%c)
)IR",
             MmInputs(20), 1, {0});
}

TEST(PlanBuffers, ReturnedGraphInputIsNotReused) {
  auto ir = [](const std::string& ret) {
    return R"IR(
graph(%x : Tensor):
  %two : float = prim::Constant[value=2.]()
  %b : Tensor = aten::mul(%x, %two)
  %c : Tensor = aten::exp(%b)
)IR" + ret;
  };
  torch::manual_seed(17);
  std::vector<c10::IValue> inputs = {Randn({3, 4})};
  ExpectPlan(ir("  return (%c, %x)\n"), inputs, 0, {-1});
  // Control: the same input not returned is planned (whether the caller
  // still holds it is checked at run time: ExpectPlan checks that the held
  // input is not overwritten).
  ExpectPlan(ir("  return (%c)\n"), inputs, 1, {0});
}

TEST(PlanBuffers, BroadcastInputIsNotReused) {
  // %x is returned (never a candidate); %v is read as a [4] row.
  const char* ir = R"IR(
graph(%x : Tensor, %v : Tensor):
  %one : int = prim::Constant[value=1]()
  %b : Tensor = aten::add(%x, %v, %one)
  %c : Tensor = aten::tanh(%b)
  return (%c, %x)
)IR";
  torch::manual_seed(18);
  ExpectPlan(ir, {Randn({3, 4}), Randn({4})}, 0, {-1});
  // Control: %v of the loop shape is taken.
  ExpectPlan(ir, {Randn({3, 4}), Randn({3, 4})}, 1, {1});
}

TEST(PlanBuffers, InputNotReadByEveryOutputIsNotReused) {
  // With %z returned, the group's outputs are (zeros_like(a), exp(a * z)):
  // the first reads nothing, so its store could clobber %a before exp(...)
  // loads it.
  auto ir = [](const std::string& ret) {
    return R"IR(
graph(%x : Tensor, %w : Tensor):
  %none : NoneType = prim::Constant()
  %a : Tensor = aten::mm(%x, %w)
  %z : Tensor = aten::zeros_like(%a, %none, %none, %none, %none, %none)
  %b : Tensor = aten::mul(%a, %z)
  %c : Tensor = aten::exp(%b)
)IR" + ret;
  };
  const std::string returned = ir("  return (%c, %z)\n");
  Fused f = SpecializeAndFuse(returned, MmInputs(19));
  const Node* g = OnlyGroup(*f.graph);
  ASSERT_NE(g, nullptr);
  ASSERT_EQ(g->inputs().size(), 1u) << *f.graph;
  ASSERT_EQ(g->outputs().size(), 2u) << *f.graph;
  EXPECT_EQ(Count(*Sub(g), "aten::zeros_like"), 1u);
  ExpectPlan(returned, MmInputs(19), 0, {-1, -1});
  // Control: with zeros_like only inside, the one output reads %a.
  ExpectPlan(ir("  return (%c)\n"), MmInputs(19), 1, {0});
}

TEST(PlanBuffers, HorizontalGroupReusesPerSegment) {
  auto inputs = ThreeUpdateInputs();
  Fused f = FuseBothWays(ThreeUpdates(), inputs, 3, 1, 3);
  const Node* g = OnlyGroup(*f.graph);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(PlanBuffers(f.graph), 3);
  // Output s takes g_s, input 2 s of the node.
  EXPECT_EQ(Reuse(g), (std::vector<int64_t>{0, 2, 4}));
  ExpectFusedMatchesPlain(f, inputs);
}

// ================================================================ lowering

TEST(ClassifyBroadcast, Forms) {
  using A = kir::Access;
  struct Case {
    std::vector<int64_t> sizes, loop;
    A access;
    int64_t inner;
    int64_t mid = 1;
  };
  const std::vector<Case> cases = {
      {{3, 4}, {3, 4}, A::kElement, 1},
      {{1, 3, 4}, {3, 4}, A::kElement, 1},  // leading ones
      {{4}, {1, 4}, A::kElement, 1},
      {{}, {3, 4}, A::kBroadcast, 1},
      {{1, 1}, {3, 4}, A::kBroadcast, 1},
      {{4}, {3, 4}, A::kInner, 4},
      {{1, 4}, {3, 4}, A::kInner, 4},
      {{3, 4}, {2, 3, 4}, A::kInner, 12},
      {{1, 1, 4}, {3, 1, 4}, A::kInner, 4},
      {{3, 1}, {3, 4}, A::kOuter, 4},
      {{2, 1, 1}, {2, 3, 4}, A::kOuter, 12},
      {{2, 3, 1}, {2, 3, 4}, A::kOuter, 4},
      {{3, 1, 5}, {3, 4, 5}, A::kMiddle, 5, 4},        // a per-task bias over rows
      {{25, 1, 1, 40}, {25, 2, 10, 40}, A::kMiddle, 40, 20},
      {{1, 3, 1}, {2, 3, 4}, A::kPeriodic, 4, 3},       // a channel vector over NCHW
      {{64, 1, 1}, {5, 64, 14, 14}, A::kPeriodic, 196, 64},
      {{1, 3, 1, 1}, {2, 3, 1, 4}, A::kPeriodic, 4, 3},  // size-1 loop dims belong to no run
  };
  for (const Case& c : cases) {
    auto got = ClassifyBroadcast(c.sizes, c.loop);
    ASSERT_TRUE(got.has_value()) << c10::IntArrayRef(c.sizes) << " in " << c10::IntArrayRef(c.loop);
    EXPECT_EQ(got->access, c.access) << c10::IntArrayRef(c.sizes) << " in "
                                     << c10::IntArrayRef(c.loop);
    if (c.access != A::kElement && c.access != A::kBroadcast) {
      EXPECT_EQ(got->inner, c.inner) << c10::IntArrayRef(c.sizes) << " in "
                                     << c10::IntArrayRef(c.loop);
    }
    if (c.access == A::kMiddle || c.access == A::kPeriodic) {
      EXPECT_EQ(got->mid, c.mid) << c10::IntArrayRef(c.sizes) << " in "
                                 << c10::IntArrayRef(c.loop);
    }
  }
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> rejected = {
      {{3, 1, 5, 1}, {3, 4, 5, 6}},  // four runs
      {{1, 4, 1, 6}, {3, 4, 5, 6}},  // four runs
      {{5}, {3, 4}},           // does not broadcast
      {{2, 3, 4}, {3, 4}},     // larger than the loop
      {{3}, {3, 1}},
  };
  for (const auto& [sizes, loop] : rejected) {
    EXPECT_FALSE(ClassifyBroadcast(sizes, loop).has_value())
        << c10::IntArrayRef(sizes) << " in " << c10::IntArrayRef(loop);
  }
}

TEST(IsFusibleNode, DecidesOnCompleteTypes) {
  auto graph = ParseGraph(R"IR(
graph(%x : Tensor, %y : Tensor, %f : Tensor, %s : Tensor, %i : Tensor):
  %one : int = prim::Constant[value=1]()
  %two : float = prim::Constant[value=2.]()
  %mode : str = prim::Constant[value="floor"]()
  %mm : Tensor = aten::mm(%x, %y)
  %add : Tensor = aten::add(%x, %y, %one)
  %mixed : Tensor = aten::add(%f, %x, %one)
  %scalar0d : Tensor = aten::add(%f, %s, %one)
  %gt : Tensor = aten::gt(%x, %y)
  %tanh : Tensor = aten::tanh(%x)
  %int : Tensor = aten::mul(%i, %i)
  %floor : Tensor = aten::div(%x, %y, %mode)
  %powt : Tensor = aten::pow(%x, %y)
  %pows : Tensor = aten::pow(%x, %two)
  return (%mm, %add, %mixed, %scalar0d, %gt, %tanh, %int, %floor, %powt, %pows)
)IR");
  torch::manual_seed(20);
  SpecializeShapes(graph, {Randn({3, 3}), Randn({3, 3}), torch::randn({3, 3}, torch::kFloat32),
                           torch::tensor(0.5, torch::kFloat64),
                           torch::ones({3, 3}, torch::kInt64)});
  auto producer = [&](size_t k) { return graph->outputs()[k]->node(); };
  const std::vector<std::pair<std::string, bool>> expected = {
      {"mm", false},      {"add", true},   {"mixed", false}, {"scalar0d", true},
      {"gt", true},       {"tanh", true},  {"int", false},   {"floor", false},
      {"powt", false},    {"pows", true},
  };
  for (size_t k = 0; k < expected.size(); ++k) {
    EXPECT_EQ(IsFusibleNode(producer(k)), expected[k].second) << expected[k].first;
  }
  EXPECT_TRUE(IsFusibleComparison(producer(4)));
  EXPECT_FALSE(IsFusibleComparison(producer(5)));
}

TEST(LowerFusionGroup, WhereOfComparisonIsASelect) {
  const char* ir = R"IR(
graph(%x : Tensor, %y : Tensor):
  %c : Tensor = aten::gt(%x, %y)
  %w : Tensor = aten::where(%c, %x, %y)
  %r : Tensor = aten::mul(%w, %w)
  return (%r)
)IR";
  torch::manual_seed(21);
  std::vector<c10::IValue> inputs = {Randn({3, 4}), Randn({3, 4})};
  Fused f = SpecializeAndFuse(ir, inputs);
  const Node* g = OnlyGroup(*f.graph);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(Count(*f.graph, "aten::gt"), 0u);
  auto plan = LowerFusionGroup(g);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const std::string text = kir::Print(plan->kernel);
  EXPECT_EQ(plan->kernel.name.rfind("fused_", 0), 0u) << plan->kernel.name;
  EXPECT_EQ(plan->kernel.inputs.size(), 2u) << text;
  EXPECT_EQ(plan->kernel.outputs.size(), 1u) << text;
  EXPECT_EQ(plan->output_dtypes, (std::vector<c10::ScalarType>{at::kDouble}));
  EXPECT_NE(text.find("select.gt"), std::string::npos) << text;
  EXPECT_NE(text.find("mul"), std::string::npos) << text;
  EXPECT_NE(text.find("f64"), std::string::npos) << text;
  int selects = 0;
  for (const kir::Node& n : plan->kernel.nodes) selects += n.op == kir::Op::kSelect;
  EXPECT_EQ(selects, 1) << text;
  EXPECT_TRUE(kir::Validate(plan->kernel).ok());
  ExpectFusedMatchesPlain(f, inputs);
}

TEST(LowerFusionGroup, RejectsWhatIsNotAnElementwiseGroup) {
  auto graph = ParseGraph(R"IR(
graph(%x : Tensor):
  %a : Tensor = aten::tanh(%x)
  return (%a)
)IR");
  SpecializeShapes(graph, {Randn({3, 3})});
  auto not_group = LowerFusionGroup(NodesOf(*graph, "aten::tanh").at(0));
  EXPECT_FALSE(not_group.ok());

  // A hand-made group holding an mm: the error names it.
  auto sub = ParseGraph(R"IR(
graph(%x : Tensor):
  %m : Tensor = aten::mm(%x, %x)
  %a : Tensor = aten::tanh(%m)
  return (%a)
)IR");
  SpecializeShapes(sub, {Randn({3, 3})});
  Value* x = graph->inputs()[0];
  Node* group = graph->create(FusionGroupKind(), {x}, 1);
  group->g_(torch::jit::attr::Subgraph, sub);
  group->output()->copyMetadata(graph->outputs()[0]);
  group->insertBefore(graph->return_node());
  auto bad = LowerFusionGroup(group);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("aten::mm"), std::string::npos)
      << bad.status();
}

// ================================================================ end to end

TEST(SpecializedRunner, FusedMatchesUnfusedFirstAndCachedRuns) {
  const char* ir = R"IR(
graph(%x : Tensor, %w : Tensor, %b : Tensor, %y : Tensor, %col : Tensor):
  %one : int = prim::Constant[value=1]()
  %none : NoneType = prim::Constant()
  %two : float = prim::Constant[value=2.]()
  %m : Tensor = aten::mm(%x, %w)
  %h : Tensor = aten::add(%m, %b, %one)
  %t : Tensor = aten::tanh(%h)
  %d : Tensor = aten::sub(%t, %y, %one)
  %sq : Tensor = aten::mul(%d, %d)
  %l : Tensor = aten::sum(%sq, %none)
  %gd : Tensor = aten::mul(%d, %two)
  %tt : Tensor = aten::mul(%t, %t)
  %dt : Tensor = aten::rsub(%tt, %one, %one)
  %gh0 : Tensor = aten::mul(%gd, %dt)
  %gh : Tensor = aten::mul(%gh0, %col)
  %sb : int[] = aten::size(%b)
  %gb : Tensor = aten::sum_to_size(%gh, %sb)
  %wt : Tensor = aten::t(%x)
  %gw : Tensor = aten::mm(%wt, %gh)
  return (%l, %gh, %gb, %gw)
)IR";
  auto make_inputs = [](uint64_t seed, int64_t rows = 5) {
    torch::manual_seed(seed);
    return std::vector<c10::IValue>{Randn({rows, 4}), Randn({4, 3}), Randn({3}),
                                    Randn({rows, 3}), Randn({rows, 1})};
  };
  StageLog log;
  SpecializedRunner fused(ParseGraph(ir), "e2e", &log);
  fused.set_fusion(true);
  SpecializedRunner unfused(ParseGraph(ir), "e2e_unfused", nullptr);
  unfused.set_fusion(false);
  EXPECT_EQ(fused.specialized(), nullptr);

  for (uint64_t seed : {22u, 22u, 23u}) {  // first, cached, cached on new values
    auto inputs = make_inputs(seed);
    std::vector<at::Tensor> held;
    for (const auto& v : inputs) held.push_back(v.toTensor().clone());
    auto got = Tensors(fused.Run(inputs));
    auto want = Tensors(unfused.Run(make_inputs(seed)));
    SCOPED_TRACE("seed " + std::to_string(seed));
    ExpectAllClose(got, want, 1e-12);
    for (size_t k = 0; k < held.size(); ++k) {
      EXPECT_TRUE(torch::equal(inputs[k].toTensor(), held[k])) << "input " << k << " changed";
    }
  }
  const SpecializationReport report = fused.report();
  EXPECT_TRUE(report.fallback.empty()) << report.fallback;
  EXPECT_GT(report.fusion_groups, 0);
  EXPECT_GT(report.fused_nodes, report.fusion_groups);
  EXPECT_LT(report.nodes_after, report.nodes_specialized);
  EXPECT_EQ(report.shape_queries_folded, 1);
  ASSERT_NE(fused.specialized(), nullptr);
  EXPECT_EQ(unfused.specialized(), nullptr);
  EXPECT_EQ(unfused.report().fusion_groups, 0);

  // Another batch size specializes again; going back finds the first
  // specialization.
  const runtime::Program* first = fused.specialized();
  for (int64_t rows : {6, 5}) {
    SCOPED_TRACE("rows " + std::to_string(rows));
    auto got = Tensors(fused.Run(make_inputs(30 + rows, rows)));
    auto want = Tensors(unfused.Run(make_inputs(30 + rows, rows)));
    ExpectAllClose(got, want, 1e-12);
    ASSERT_EQ(got[1].size(0), rows);
    if (rows == 6) {
      EXPECT_NE(fused.specialized(), first);
    }
    if (rows == 5) {
      EXPECT_EQ(fused.specialized(), first);
    }
  }
  EXPECT_TRUE(fused.report().fallback.empty()) << fused.report().fallback;
}

}  // namespace
}  // namespace metafuse::compiler
