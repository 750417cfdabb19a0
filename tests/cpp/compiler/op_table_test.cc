// The op table against what is derived from it: every differentiable
// primitive has a derivative rule and every rule belongs to a differentiable
// primitive; only elementwise ops have a fuser form; lookups by name and by
// node agree.
#include "compiler/ir/op_table.h"

#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/irparser.h>

#include <set>
#include <string>

#include "compiler/autodiff/derivative_rules.h"
#include "compiler/ir/primitives.h"

namespace metafuse::compiler {
namespace {

const std::set<std::string> kRuleNames = {
    "aten::add", "aten::sub", "aten::rsub", "aten::mul", "aten::div", "aten::neg",
    "aten::exp", "aten::log", "aten::tanh", "aten::sigmoid", "aten::relu", "aten::sqrt",
    "aten::pow", "aten::sin", "aten::cos", "aten::erf", "aten::log1p", "aten::expm1",
    "aten::abs", "aten::where",
    "aten::type_as", "aten::clone", "aten::contiguous", "aten::sum", "aten::mean",
    "aten::logsumexp", "aten::amax", "aten::reshape", "aten::expand",
    "aten::sum_to_size", "aten::t", "aten::transpose", "aten::unsqueeze", "aten::squeeze",
    "aten::mm", "aten::bmm", "aten::flatten", "aten::permute", "aten::constant_pad_nd", "aten::conv2d",
    "aten::conv_transpose2d", "aten::max_pool2d_with_indices", "aten::gather",
    "aten::scatter_add", "metafuse::adam"};

TEST(OpTable, DifferentiablePrimitivesAreExactlyThoseWithRules) {
  std::set<std::string> differentiable;
  for (const PrimitiveOp& op : PrimitiveOps()) {
    const bool has_rule = rules::FindRule(op.name) != nullptr;
    if (op.differentiable) {
      differentiable.insert(op.name);
      EXPECT_TRUE(has_rule) << op.name << " is differentiable but has no derivative rule";
    } else {
      EXPECT_FALSE(has_rule) << op.name << " carries no gradient but has a rule";
    }
  }
  EXPECT_EQ(differentiable, kRuleNames);
  for (const std::string& name : kRuleNames) {
    EXPECT_NE(rules::FindRule(name), nullptr) << name;
  }
  EXPECT_EQ(rules::FindRule("aten::cumsum"), nullptr);
}

TEST(OpTable, OnlyElementwiseOpsHaveAFuserFormAndEachIsListedOnce) {
  std::set<std::string> seen;
  for (const PrimitiveOp& op : PrimitiveOps()) {
    EXPECT_TRUE(seen.insert(op.name).second) << op.name << " listed twice";
    if (op.fuser_form != FuserForm::kNone && op.family != OpFamily::kElementwise) {
      EXPECT_EQ(std::string(op.name), "aten::expand") << "only expand is fused outside "
                                                         "the elementwise family";
    }
  }
  EXPECT_EQ(FindPrimitiveOp("aten::rsqrt"), nullptr) << "rsqrt is decomposed, not primitive";
}

TEST(OpTable, LookupByNodeMatchesLookupByNameAndDrivesIsPrimitive) {
  auto graph = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR(R"IR(
graph(%x : Tensor, %y : Tensor):
  %one : int = prim::Constant[value=1]()
  %a : Tensor = aten::add(%x, %y, %one)
  %c : Tensor = aten::cumsum(%a, %one, %one)
  %g : Tensor = aten::gt(%a, %y)
  return (%c, %g)
)IR",
                     graph.get());
  for (torch::jit::Node* n : graph->nodes()) {
    const std::string name = n->kind().toQualString();
    EXPECT_EQ(FindPrimitiveOp(n), FindPrimitiveOp(name)) << name;
    EXPECT_EQ(IsPrimitive(n), FindPrimitiveOp(name) != nullptr) << name;
  }
  EXPECT_FALSE(FindPrimitiveOp("aten::gt")->differentiable);
  EXPECT_EQ(FindPrimitiveOp("aten::gt")->fuser_form, FuserForm::kCompare);
  EXPECT_EQ(FindPrimitiveOp("metafuse::adam")->family, OpFamily::kOptimizer);
}

}  // namespace
}  // namespace metafuse::compiler
