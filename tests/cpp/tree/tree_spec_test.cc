// TreeSpec core without Python or LibTorch: counts, children, printing,
// equality, literal encoding and serialization round trips and rejections.
#include "tree/tree_spec.h"

#include <gtest/gtest.h>

#include "tree/literal.h"
#include "tree/serialization.h"

namespace metafuse::tree {
namespace {

std::shared_ptr<const NodeData> Keys(std::vector<std::string> keys) {
  std::vector<Literal> values;
  for (auto& k : keys) values.push_back(Literal::String(k));
  return std::make_shared<const LiteralNodeData>("", std::move(values));
}

// {'a': *, 'b': [*, *]}
TreeSpecPtr Example() {
  std::vector<Node> nodes;
  AppendNode(&nodes, NodeKind::kLeaf, 0, nullptr);
  AppendNode(&nodes, NodeKind::kLeaf, 0, nullptr);
  AppendNode(&nodes, NodeKind::kLeaf, 0, nullptr);
  AppendNode(&nodes, NodeKind::kList, 2, nullptr);
  AppendNode(&nodes, NodeKind::kDict, 2, Keys({"a", "b"}));
  return std::make_shared<const TreeSpec>(std::move(nodes), false, "");
}

TEST(TreeSpec, CountsChildrenAndPrinting) {
  TreeSpecPtr spec = Example();
  EXPECT_EQ(spec->num_leaves(), 3);
  EXPECT_EQ(spec->num_nodes(), 5);
  EXPECT_EQ(spec->num_children(), 2);
  EXPECT_EQ(spec->ToString(), "TreeSpec({'a': *, 'b': [*, *]})");
  auto children = spec->Children();
  ASSERT_EQ(children.size(), 2u);
  EXPECT_TRUE(children[0]->is_leaf());
  EXPECT_EQ(children[1]->ToString(), "TreeSpec([*, *])");
}

TEST(TreeSpec, EqualityAndHash) {
  EXPECT_EQ(*Example(), *Example());
  EXPECT_EQ(Example()->Hash(), Example()->Hash());
  std::vector<Node> nodes;
  AppendNode(&nodes, NodeKind::kLeaf, 0, nullptr);
  AppendNode(&nodes, NodeKind::kLeaf, 0, nullptr);
  AppendNode(&nodes, NodeKind::kDict, 2, Keys({"a", "c"}));
  TreeSpec other(std::move(nodes), false, "");
  EXPECT_NE(*Example(), other);
  EXPECT_NE(*TreeSpec::Leaf(false), *TreeSpec::Leaf(true));
  EXPECT_NE(*TreeSpec::Leaf(false, "ns"), *TreeSpec::Leaf(false));
}

TEST(Literal, EncodeDecodeRoundTrip) {
  Literal value = Literal::Tuple(
      {Literal::None(), Literal::Bool(true), Literal::Int(-42),
       Literal::Float(0.1), Literal::String("a:b;c(d)"),
       Literal::Tuple({Literal::Int(1)})});
  std::string text;
  EncodeLiteral(value, &text);
  std::string_view in(text);
  auto decoded = DecodeLiteral(&in);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, value);
  EXPECT_TRUE(in.empty());
  EXPECT_EQ(LiteralRepr(value), "(None, True, -42, 0.1, 'a:b;c(d)', (1,))");
}

TEST(Literal, MixedTypesAreUnordered) {
  EXPECT_FALSE(LiteralLess(Literal::Int(1), Literal::String("a")).ok());
  EXPECT_TRUE(*LiteralLess(Literal::Int(1), Literal::Float(1.5)));
}

TEST(Serialization, RoundTripIsStable) {
  auto text = SerializeTreeSpec(*Example());
  ASSERT_TRUE(text.ok());
  auto back = DeserializeTreeSpec(*text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(**back, *Example());
  EXPECT_EQ(*SerializeTreeSpec(**back), *text);
  EXPECT_EQ((*back)->ToString(), "TreeSpec({'a': *, 'b': [*, *]})");
}

TEST(Serialization, RejectsMalformedText) {
  std::string good = *SerializeTreeSpec(*Example());
  for (std::string bad :
       {std::string(""), std::string("garbage"), good.substr(0, good.size() - 3),
        good + "x", std::string("(s13:metafuse.treei2;Fs0:((i0;i0;s0:())))")}) {
    EXPECT_FALSE(DeserializeTreeSpec(bad).ok()) << bad;
  }
  // A list claiming two children with only one subtree before it.
  std::string broken = "(s13:metafuse.treei1;Fs0:((i0;i0;s0:())(i3;i2;s0:())))";
  auto status = DeserializeTreeSpec(broken).status();
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("do not form a tree"), std::string::npos)
      << status;
}

}  // namespace
}  // namespace metafuse::tree
