// The IValue side of tree/: flatten/unflatten round trips over nested
// Tuple/List/GenericDict/None, map, arithmetic, the C++ registration API and
// every error path (mismatch with path, bad keys, depth).
#include "tree/ivalue_tree.h"

#include <gtest/gtest.h>
#include <torch/custom_class.h>
#include <torch/torch.h>

#include "tree/ivalue_registry.h"
#include "tree/serialization.h"

namespace metafuse::tree {
namespace {

c10::IValue Dict(std::vector<std::pair<std::string, c10::IValue>> items) {
  c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
  for (auto& [k, v] : items) dict.insert(k, v);
  return dict;
}

c10::IValue List(std::vector<c10::IValue> items) {
  c10::impl::GenericList list(c10::AnyType::get());
  for (auto& v : items) list.push_back(v);
  return list;
}

c10::IValue Example() {
  // {'w': tensor, 'b': (tensor, None, [tensor, 3])}; keys inserted unsorted.
  return Dict({{"w", torch::ones({2})},
               {"b", c10::ivalue::Tuple::create(
                         {torch::zeros({1}), c10::IValue(),
                          List({torch::full({3}, 2.0), c10::IValue(3)})})}});
}

TEST(IValueTree, FlattenSortsKeysAndRoundTrips) {
  auto flat = Flatten(Example());
  ASSERT_TRUE(flat.ok()) << flat.status();
  EXPECT_EQ(flat->spec->ToString(), "TreeSpec({'b': (*, None, [*, *]), 'w': *})");
  ASSERT_EQ(flat->leaves.size(), 4u);
  EXPECT_TRUE(flat->leaves[0].toTensor().equal(torch::zeros({1})));
  EXPECT_EQ(flat->leaves[2].toInt(), 3);
  auto back = Unflatten(*flat->spec, flat->leaves);
  ASSERT_TRUE(back.ok()) << back.status();
  auto again = Flatten(*back);
  EXPECT_EQ(*again->spec, *flat->spec);
  EXPECT_TRUE(back->isGenericDict());
}

TEST(IValueTree, NoneIsLeaf) {
  auto flat = Flatten(Example(), /*none_is_leaf=*/true);
  EXPECT_EQ(flat->leaves.size(), 5u);
  EXPECT_TRUE(flat->leaves[1].isNone());
  EXPECT_NE(*flat->spec, *Flatten(Example())->spec);
}

TEST(IValueTree, SerializedSpecUnflattens) {
  auto flat = Flatten(Example());
  auto spec = DeserializeTreeSpec(*SerializeTreeSpec(*flat->spec));
  ASSERT_TRUE(spec.ok());
  auto back = Unflatten(**spec, flat->leaves);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*Flatten(*back)->spec, *flat->spec);
}

TEST(IValueTree, MapIsNaryAndChecksStructure) {
  auto doubled = Map(
      [](const std::vector<c10::IValue>& x) -> c10::IValue {
        if (!x[0].isTensor()) return x[0];
        return x[0].toTensor() + x[1].toTensor();
      },
      {Example(), Example()});
  ASSERT_TRUE(doubled.ok()) << doubled.status();
  auto leaves = *Leaves(*doubled);
  EXPECT_TRUE(leaves[3].toTensor().equal(torch::full({2}, 2.0)));

  c10::IValue other = Dict({{"w", torch::ones({2})},
                            {"b", c10::ivalue::Tuple::create(
                                      {torch::zeros({1}), c10::IValue(),
                                       List({torch::ones({1})})})}});
  auto bad = Map([](const std::vector<c10::IValue>& x) { return x[0]; },
                 {Example(), other});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("tree['b'][2]"), std::string::npos)
      << bad.status();
  EXPECT_NE(bad.status().message().find("a list of 2 items"), std::string::npos);
  EXPECT_NE(bad.status().message().find("a list of 1 items"), std::string::npos);
}

TEST(IValueTree, PathsAndInplaceMap) {
  auto flat = FlattenWithPath(Example());
  ASSERT_TRUE(flat.ok());
  ASSERT_EQ(flat->paths.size(), 4u);
  EXPECT_EQ(flat->paths[2], (std::vector<Literal>{Literal::String("b"), Literal::Int(2),
                                                  Literal::Int(1)}));
  EXPECT_EQ(flat->paths[3], std::vector<Literal>{Literal::String("w")});
  c10::IValue tree = Example();
  int visited = 0;
  ASSERT_TRUE(MapInplace(
                  [&](const std::vector<c10::IValue>& x) {
                    ++visited;
                    if (x[0].isTensor()) x[0].toTensor().add_(1);
                  },
                  {tree})
                  .ok());
  EXPECT_EQ(visited, 4);
  EXPECT_TRUE((*Leaves(tree))[3].toTensor().equal(torch::full({2}, 2.0)));
  EXPECT_FALSE(MapInplace([](const std::vector<c10::IValue>&) {}, {tree, c10::IValue(1)}).ok());
}

TEST(IValueTree, FlattenAsReportsWhatEachSideHas) {
  auto spec = *Structure(Example());
  auto status = FlattenAs(*spec, Dict({{"w", torch::ones({2})}})).status();
  EXPECT_NE(status.message().find("expected a dict with keys ['b', 'w']"),
            std::string::npos)
      << status;
  EXPECT_NE(status.message().find("got a dict with keys ['w']"), std::string::npos)
      << status;
  status = FlattenAs(*spec, torch::ones({1})).status();
  EXPECT_NE(status.message().find("got a leaf (Tensor)"), std::string::npos)
      << status;
}

TEST(IValueTree, Arithmetic) {
  c10::IValue a = c10::ivalue::Tuple::create({torch::ones({2}), torch::full({1}, 3.0)});
  c10::IValue b = c10::ivalue::Tuple::create({torch::full({2}, 2.0), torch::ones({1})});
  auto sum = *Leaves(*Add(a, b, 2));
  EXPECT_TRUE(sum[0].toTensor().equal(torch::full({2}, 5.0)));
  auto diff = *Leaves(*Sub(a, b));
  EXPECT_TRUE(diff[1].toTensor().equal(torch::full({1}, 2.0)));
  auto scaled = *Leaves(*ScalarMul(0.5, a));
  EXPECT_TRUE(scaled[1].toTensor().equal(torch::full({1}, 1.5)));
  EXPECT_DOUBLE_EQ(Vdot(a, b)->item<double>(), 2 + 2 + 3);
  EXPECT_FALSE(Add(a, c10::ivalue::Tuple::create({torch::ones({2})})).ok());
  EXPECT_FALSE(Add(c10::ivalue::Tuple::create({c10::IValue(1)}),
                   c10::ivalue::Tuple::create({c10::IValue(1)}))
                   .ok());
}

TEST(IValueTree, BadKeysAndDepthAreErrors) {
  c10::impl::GenericDict tensor_keys(c10::TensorType::get(), c10::IntType::get());
  tensor_keys.insert(torch::ones({1}), 1);
  auto status = Flatten(tensor_keys).status();
  EXPECT_NE(status.message().find("not supported"), std::string::npos) << status;

  c10::impl::GenericDict mixed(c10::AnyType::get(), c10::IntType::get());
  mixed.insert(c10::IValue("a"), 1);
  mixed.insert(c10::IValue(int64_t{2}), 2);
  status = Flatten(List({mixed})).status();
  EXPECT_NE(status.message().find("at tree[0]: dict keys"), std::string::npos) << status;
  EXPECT_NE(status.message().find("cannot be ordered"), std::string::npos) << status;

  c10::IValue deep = torch::ones({1});
  for (int i = 0; i < kMaxDepth + 5; ++i) deep = List({deep});
  status = Flatten(deep).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(status.message().find("deeper than"), std::string::npos);

  auto spec = *Structure(Example());
  EXPECT_FALSE(Unflatten(*spec, {}).ok());
}

struct Pair : torch::CustomClassHolder {
  Pair(at::Tensor a, at::Tensor b, int64_t tag) : a(a), b(b), tag(tag) {}
  at::Tensor a, b;
  int64_t tag;
};

TORCH_LIBRARY(metafuse_tree_test, m) { m.class_<Pair>("Pair"); }

TEST(IValueTree, RegisteredCppNodes) {
  c10::IValue pair(c10::make_intrusive<Pair>(torch::ones({1}), torch::zeros({2}), 7));
  const std::string name = pair.type()->str();
  ASSERT_FALSE(Flatten(pair)->spec->num_leaves() != 1);  // unregistered: a leaf
  IValueNodeDef def;
  def.flatten = [](const c10::IValue& v, Literal* context) {
    auto p = v.toCustomClass<Pair>();
    *context = Literal::Int(p->tag);
    return std::vector<c10::IValue>{p->a, p->b};
  };
  def.unflatten = [](const Literal& context, std::vector<c10::IValue> c) {
    return c10::IValue(c10::make_intrusive<Pair>(c[0].toTensor(),
                                                 c[1].toTensor(), context.i));
  };
  ASSERT_TRUE(RegisterIValueNode(name, def).ok());
  EXPECT_EQ(RegisterIValueNode(name, def).code(), absl::StatusCode::kAlreadyExists);
  auto flat = Flatten(List({pair}));
  ASSERT_TRUE(flat.ok());
  EXPECT_EQ(flat->leaves.size(), 2u);
  auto scaled = ScalarMul(3, List({pair}));
  ASSERT_TRUE(scaled.ok()) << scaled.status();
  auto p = scaled->toList().get(0).toCustomClass<Pair>();
  EXPECT_EQ(p->tag, 7);
  EXPECT_TRUE(p->a.equal(torch::full({1}, 3.0)));
  ASSERT_TRUE(UnregisterIValueNode(name).ok());
  EXPECT_FALSE(Unflatten(*flat->spec, flat->leaves).ok());
}

}  // namespace
}  // namespace metafuse::tree
