// EliminateOptimizerBackward on primitive-set graphs of the generic Adam /
// AdamW update chain, written as PrepareCapturedGraph leaves them: IR before
// and after, chains that must be left alone, and values, first and second
// derivatives (AppendVjp) of the graph before and after the pass, in float64.
#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/irparser.h>
#include <torch/torch.h>

#include "compiler/lowering/lower_to_program.h"
#include "compiler/autodiff/autodiff.h"
#include "compiler/autodiff/eliminate_optimizer_backward.h"
#include "runtime/executor/program.h"

namespace metafuse::compiler {
namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Symbol;
using torch::jit::Value;

constexpr const char* kType =
    "Double(3, 2, strides=[2, 1], requires_grad=0, device=cpu)";

struct ChainOptions {
  int count = 2;
  double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8, eps_root = 1e-10;
  double coupled_wd = 0.0, decoupled_wd = 0.0;
  bool maximize = false;
  bool exact_bias_correction = true;  // false: bc1 that no step count gives
  bool return_root = false;           // the square root is also an output
};

std::string Number(double x) {
  std::ostringstream os;
  os << std::setprecision(17) << x;
  std::string s = os.str();
  if (s.find_first_of(".e") == std::string::npos) s += ".";
  return s;
}

// One update step from (%g<k>, %mu<k-1>, %nu<k-1>, %p<k-1>) to
// (%p<k>, %mu<k>, %nu<k>), as the frontend's transforms trace after
// LowerOptimizerOps and decomposition (intermediates untyped, as there).
std::string StepIR(int k, const ChainOptions& o) {
  const std::string s = std::to_string(k), prev = std::to_string(k - 1);
  const std::string T = kType;
  const double bc1 = o.exact_bias_correction ? 1.0 - std::pow(o.b1, o.count) : 0.5;
  const double bc2 = 1.0 - std::pow(o.b2, o.count);
  std::ostringstream ir;
  auto constant = [&](const std::string& name, double value) {
    ir << "  %" << name << s << " : float = prim::Constant[value=" << Number(value)
       << "]()\n";
  };
  constant("b1_", o.b1);
  constant("omb1_", 1.0 - o.b1);
  constant("b2_", o.b2);
  constant("omb2_", 1.0 - o.b2);
  constant("bc1_", bc1);
  constant("bc2_", bc2);
  constant("er_", o.eps_root);
  constant("eps_", o.eps);
  constant("neglr_", -o.lr);
  ir << "  %one" << s << " : int = prim::Constant[value=1]()\n";
  std::string g = "%g" + s;
  if (o.maximize) {
    constant("minus_", -1.0);
    ir << "  %gneg" << s << " : Tensor = aten::mul(" << g << ", %minus_" << s << ")\n";
    g = "%gneg" + s;
  }
  if (o.coupled_wd != 0.0) {
    constant("cwd_", o.coupled_wd);
    ir << "  %gwd" << s << " : Tensor = aten::add(" << g << ", %p" << prev << ", %cwd_"
       << s << ")\n";
    g = "%gwd" + s;
  }
  ir << "  %m0_" << s << " : Tensor = aten::mul(%mu" << prev << ", %b1_" << s << ")\n"
     << "  %mu" << s << " : " << T << " = aten::add(%m0_" << s << ", " << g
     << ", %omb1_" << s << ")\n"
     << "  %n0_" << s << " : Tensor = aten::mul(%nu" << prev << ", %b2_" << s << ")\n"
     << "  %sq" << s << " : Tensor = aten::mul(" << g << ", " << g << ")\n"
     << "  %sqs" << s << " : Tensor = aten::mul(%sq" << s << ", %omb2_" << s << ")\n"
     << "  %nu" << s << " : " << T << " = aten::add(%n0_" << s << ", %sqs" << s
     << ", %one" << s << ")\n"
     << "  %nh" << s << " : Tensor = aten::div(%nu" << s << ", %bc2_" << s << ")\n"
     << "  %nr" << s << " : Tensor = aten::add(%nh" << s << ", %er_" << s << ", %one"
     << s << ")\n"
     << "  %root" << s << " : Tensor = aten::sqrt(%nr" << s << ")\n"
     << "  %den" << s << " : Tensor = aten::add(%root" << s << ", %eps_" << s
     << ", %one" << s << ")\n"
     << "  %mh" << s << " : Tensor = aten::div(%mu" << s << ", %bc1_" << s << ")\n"
     << "  %u" << s << " : Tensor = aten::div(%mh" << s << ", %den" << s << ")\n";
  std::string u = "%u" + s;
  if (o.decoupled_wd != 0.0) {
    constant("dwd_", o.decoupled_wd);
    ir << "  %uwd" << s << " : Tensor = aten::add(" << u << ", %p" << prev << ", %dwd_"
       << s << ")\n";
    u = "%uwd" + s;
  }
  ir << "  %upd" << s << " : " << T << " = aten::mul(" << u << ", %neglr_" << s
     << ")\n"
     << "  %p" << s << " : " << T << " = aten::add(%p" << prev << ", %upd" << s
     << ", %one" << s << ")\n";
  return ir.str();
}

// Inputs (g1..gK, mu0, nu0, p0); outputs (pK, muK, nuK[, root1]).
std::shared_ptr<Graph> ChainGraph(const std::vector<ChainOptions>& steps) {
  std::ostringstream ir;
  ir << "graph(";
  for (size_t k = 1; k <= steps.size(); ++k) ir << "%g" << k << " : " << kType << ", ";
  ir << "%mu0 : " << kType << ", %nu0 : " << kType << ", %p0 : " << kType << "):\n";
  for (size_t k = 1; k <= steps.size(); ++k) ir << StepIR(k, steps[k - 1]);
  const std::string last = std::to_string(steps.size());
  ir << "  return (%p" << last << ", %mu" << last << ", %nu" << last
     << (steps[0].return_root ? ", %root1" : "") << ")\n";
  auto graph = std::make_shared<Graph>();
  torch::jit::parseIR(ir.str(), graph.get());
  return graph;
}

int Count(const Graph& graph, const char* kind) {
  int n = 0;
  for (const Node* node : graph.nodes()) n += node->kind().toQualString() == std::string(kind);
  return n;
}

const Node* OnlyAdam(const Graph& graph) {
  for (const Node* node : graph.nodes()) {
    if (node->kind().toQualString() == std::string("metafuse::adam")) return node;
  }
  return nullptr;
}

c10::IValue Hyper(const Node* adam, const char* name) {
  return *torch::jit::toIValue(adam->namedInput(Symbol::attr(name)));
}

TEST(EliminateOptimizerBackward, AdamChainBecomesOneNode) {
  auto graph = ChainGraph({ChainOptions{}});
  ASSERT_EQ(Count(*graph, "aten::sqrt"), 1);
  ASSERT_EQ(Count(*graph, "aten::div"), 3);
  const std::string before = graph->toString();
  OptimizerEliminationStats stats = EliminateOptimizerBackward(graph);
  EXPECT_EQ(stats.adam, 1);
  EXPECT_EQ(stats.adamw, 0);
  EXPECT_EQ(Count(*graph, "metafuse::adam"), 1);
  EXPECT_EQ(Count(*graph, "aten::sqrt"), 0);
  EXPECT_EQ(Count(*graph, "aten::div"), 0);
  // What is left: the node and the parameter update p + update.
  EXPECT_EQ(Count(*graph, "aten::mul"), 0);
  EXPECT_EQ(Count(*graph, "aten::add"), 1);
  const Node* adam = OnlyAdam(*graph);
  ASSERT_NE(adam, nullptr) << before << "\nafter:\n" << *graph;
  EXPECT_EQ(Hyper(adam, "count").toInt(), 2);
  EXPECT_EQ(Hyper(adam, "lr").toDouble(), 0.01);
  EXPECT_EQ(Hyper(adam, "b1").toDouble(), 0.9);
  EXPECT_EQ(Hyper(adam, "b2").toDouble(), 0.999);
  EXPECT_EQ(Hyper(adam, "eps").toDouble(), 1e-8);
  EXPECT_EQ(Hyper(adam, "eps_root").toDouble(), 1e-10);
  EXPECT_EQ(Hyper(adam, "weight_decay").toDouble(), 0.0);
  EXPECT_FALSE(Hyper(adam, "maximize").toBool());
  EXPECT_TRUE(adam->input(3)->type()->kind() == c10::TypeKind::NoneType);
  // The node's results are the graph's moments and the update.
  EXPECT_EQ(graph->outputs()[1], adam->output(1));
  EXPECT_EQ(graph->outputs()[2], adam->output(2));
  graph->lint();
}

TEST(EliminateOptimizerBackward, AdamWWithMaximizeAbsorbsTheDecayAndTheSign) {
  ChainOptions o;
  o.decoupled_wd = 0.05;
  o.maximize = true;
  auto graph = ChainGraph({o});
  OptimizerEliminationStats stats = EliminateOptimizerBackward(graph);
  EXPECT_EQ(stats.adam, 0);
  EXPECT_EQ(stats.adamw, 1);
  const Node* adam = OnlyAdam(*graph);
  ASSERT_NE(adam, nullptr) << *graph;
  EXPECT_TRUE(Hyper(adam, "decoupled_weight_decay").toBool());
  EXPECT_TRUE(Hyper(adam, "maximize").toBool());
  EXPECT_EQ(Hyper(adam, "weight_decay").toDouble(), 0.05);
  EXPECT_EQ(adam->input(0), graph->inputs()[0]);  // the raw gradient
  EXPECT_EQ(adam->input(3), graph->inputs()[3]);  // the parameter
  EXPECT_EQ(Count(*graph, "aten::mul"), 0);
  graph->lint();
}

TEST(EliminateOptimizerBackward, CoupledDecayIsAbsorbed) {
  ChainOptions o;
  o.coupled_wd = 0.1;
  o.maximize = true;
  auto graph = ChainGraph({o});
  EXPECT_EQ(EliminateOptimizerBackward(graph).adam, 1);
  const Node* adam = OnlyAdam(*graph);
  ASSERT_NE(adam, nullptr) << *graph;
  EXPECT_FALSE(Hyper(adam, "decoupled_weight_decay").toBool());
  EXPECT_TRUE(Hyper(adam, "maximize").toBool());
  EXPECT_EQ(Hyper(adam, "weight_decay").toDouble(), 0.1);
  EXPECT_EQ(adam->input(0), graph->inputs()[0]);
  EXPECT_EQ(Count(*graph, "aten::add"), 1);  // p + update only
}

TEST(EliminateOptimizerBackward, ChainsThatMustStayAreLeftAlone) {
  ChainOptions shared_root;
  shared_root.return_root = true;  // an intermediate with another user
  ChainOptions bad_count;
  bad_count.exact_bias_correction = false;  // no step count gives this bc1
  ChainOptions no_b2;
  no_b2.b2 = 0.0;  // the node needs b2 in (0, 1)
  for (const auto& o : {shared_root, bad_count, no_b2}) {
    auto graph = ChainGraph({o});
    const std::string before = graph->toString();
    EXPECT_EQ(EliminateOptimizerBackward(graph).total(), 0);
    EXPECT_EQ(graph->toString(), before);
  }
  // A learning rate that is a tensor (not a constant the node can take).
  auto graph = ChainGraph({ChainOptions{}});
  Node* scale = graph->outputs()[0]->node()->input(1)->node();
  ASSERT_EQ(scale->kind().toQualString(), std::string("aten::mul"));
  Value* lr = graph->addInput("lr");
  lr->setType(c10::TensorType::get());
  scale->replaceInput(1, lr);
  const std::string before = graph->toString();
  EXPECT_EQ(EliminateOptimizerBackward(graph).total(), 0);
  EXPECT_EQ(graph->toString(), before);
  // A moment whose shape broadcasts (the node does not broadcast).
  auto broadcast = ChainGraph({ChainOptions{}});
  broadcast->inputs()[1]->setType(c10::TensorType::createContiguous(
      at::kDouble, at::kCPU, {1, 2}));
  EXPECT_EQ(EliminateOptimizerBackward(broadcast).total(), 0);
  EXPECT_EQ(Count(*broadcast, "aten::sqrt"), 1);
}

// Runs `graph` (inputs g..., mu0, nu0, p0) with the first and second
// derivatives appended: outputs, then d<outputs, v>/d(inputs), then
// d<first, u>/d(inputs).
std::vector<at::Tensor> RunWithDerivatives(std::shared_ptr<Graph> graph,
                                           const std::vector<at::Tensor>& inputs,
                                           uint64_t seed) {
  torch::manual_seed(seed);
  std::vector<Value*> wrt(graph->inputs().begin(), graph->inputs().end());
  std::vector<Value*> outputs(graph->outputs().begin(), graph->outputs().end());
  std::vector<c10::IValue> values(inputs.begin(), inputs.end());
  std::vector<Value*> vs, us;
  for (size_t i = 0; i < outputs.size(); ++i) {
    vs.push_back(graph->addInput("v"));
    vs.back()->setType(c10::TensorType::get());
    values.push_back(torch::randn({3, 2}, torch::kDouble));
  }
  for (size_t i = 0; i < wrt.size(); ++i) {
    us.push_back(graph->addInput("u"));
    us.back()->setType(c10::TensorType::get());
    values.push_back(torch::randn({3, 2}, torch::kDouble));
  }
  std::vector<Value*> first = AppendVjp(*graph, outputs, vs, wrt);
  torch::jit::WithInsertPoint at_end(graph->return_node());
  Value* s = nullptr;
  for (size_t i = 0; i < first.size(); ++i) {
    Value* term = graph->insert(
        Symbol::fromQualString("aten::sum"),
        {graph->insert(Symbol::fromQualString("aten::mul"), {first[i], us[i]})});
    s = s ? graph->insert(Symbol::fromQualString("aten::add"), {s, term}) : term;
  }
  Value* seed2 = graph->insert(Symbol::fromQualString("aten::ones_like"), {s});
  std::vector<Value*> second = AppendVjp(*graph, {s}, {seed2}, wrt);
  for (Value* g : first) graph->registerOutput(g);
  for (Value* g : second) graph->registerOutput(g);
  std::vector<at::Tensor> result;
  for (const auto& v : MakeProgram(*graph).Run(values)) result.push_back(v.toTensor());
  return result;
}

void ExpectSameValuesAndDerivatives(const std::vector<ChainOptions>& steps,
                                    int expected_rewrites) {
  torch::manual_seed(7);
  std::vector<at::Tensor> inputs;
  for (size_t k = 0; k < steps.size(); ++k)
    inputs.push_back(torch::randn({3, 2}, torch::kDouble));
  inputs.push_back(0.1 * torch::randn({3, 2}, torch::kDouble));       // mu0
  inputs.push_back(0.1 + torch::rand({3, 2}, torch::kDouble));        // nu0 > 0
  inputs.push_back(torch::randn({3, 2}, torch::kDouble));             // p0
  auto generic = ChainGraph(steps);
  auto closed = ChainGraph(steps);
  ASSERT_EQ(EliminateOptimizerBackward(closed).total(), expected_rewrites);
  ASSERT_EQ(Count(*closed, "metafuse::adam"), expected_rewrites);
  auto a = RunWithDerivatives(generic, inputs, 11);
  auto b = RunWithDerivatives(closed, inputs, 11);
  ASSERT_EQ(a.size(), b.size());
  const size_t n_out = generic->outputs().size() - 2 * inputs.size();
  for (size_t i = 0; i < a.size(); ++i) {
    const char* what = i < n_out ? "value"
                       : i < n_out + inputs.size() ? "first derivative"
                                                   : "second derivative";
    const double scale = a[i].abs().max().item<double>();
    EXPECT_TRUE(torch::allclose(b[i], a[i], 1e-12, 1e-12 * scale))
        << what << " " << i << ": max abs diff "
        << (b[i] - a[i]).abs().max().item<double>() << ", max |expected| " << scale;
  }
  // Second derivatives with respect to the first gradient and the moments
  // are not identically zero: the comparison means something.
  for (size_t i = 0; i < inputs.size() - 1; ++i) {
    EXPECT_GT(a[n_out + inputs.size() + i].abs().max().item<double>(), 0.0) << i;
  }
}

// eps and eps_root are large enough here to move every value well beyond
// the 1e-12 tolerance if the node took them wrongly.
TEST(EliminateOptimizerBackward, AdamValuesAndDerivativesAgree) {
  ChainOptions first;
  first.count = 1;
  first.eps = 1e-3;
  ChainOptions second;  // count 2, reads the first step's moments
  second.eps = 0.05;
  second.eps_root = 1e-4;
  second.b1 = 0.8;
  second.lr = 0.3;
  ExpectSameValuesAndDerivatives({first, second}, 2);
}

TEST(EliminateOptimizerBackward, AdamWAndCoupledDecayValuesAndDerivativesAgree) {
  ChainOptions adamw;
  adamw.count = 3;
  adamw.decoupled_wd = 0.05;
  adamw.maximize = true;
  adamw.eps = 1e-2;
  ExpectSameValuesAndDerivatives({adamw}, 1);
  ChainOptions coupled;
  coupled.count = 4;
  coupled.coupled_wd = 0.1;
  coupled.eps_root = 0.0;
  coupled.eps = 1e-3;
  ExpectSameValuesAndDerivatives({coupled}, 1);
}

}  // namespace
}  // namespace metafuse::compiler
