#include "tree/ivalue_tree.h"

#include <algorithm>

#include <ATen/core/Dict.h>
#include <ATen/core/List.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tree/ivalue_registry.h"
#include "tree/tensor_ops.h"

namespace metafuse::tree {

namespace {

// The keys and indices leading to the node being visited.
using Path = std::vector<Literal>;

// tree[0]['w']
std::string PathString(const Path& path) {
  std::string out = "tree";
  for (const Literal& segment : path) absl::StrAppend(&out, "[", LiteralRepr(segment), "]");
  return out;
}

Literal Index(size_t i) { return Literal::Int(static_cast<int64_t>(i)); }

absl::StatusOr<Literal> KeyToLiteral(const c10::IValue& key) {
  if (key.isString()) return Literal::String(key.toStringRef());
  if (key.isInt()) return Literal::Int(key.toInt());
  if (key.isDouble()) return Literal::Float(key.toDouble());
  if (key.isBool()) return Literal::Bool(key.toBool());
  return absl::InvalidArgumentError(absl::StrCat(
      "dict key of type ", key.tagKind(),
      " is not supported in a tree (use str, int, float or bool keys)"));
}

c10::IValue LiteralToKey(const Literal& key) {
  switch (key.type) {
    case Literal::Type::kString: return c10::IValue(key.s);
    case Literal::Type::kInt: return c10::IValue(key.i);
    case Literal::Type::kFloat: return c10::IValue(key.f);
    case Literal::Type::kBool: return c10::IValue(key.b);
    default: return c10::IValue();
  }
}

const LiteralNodeData& DataOf(const Node& node) {
  return static_cast<const LiteralNodeData&>(*node.data);
}

// Dict entries with their keys as Literals, sorted.
absl::StatusOr<std::vector<std::pair<Literal, c10::IValue>>> SortedEntries(
    const c10::impl::GenericDict& dict, const Path& path) {
  std::vector<std::pair<Literal, c10::IValue>> entries;
  entries.reserve(dict.size());
  for (const auto& entry : dict) {
    auto key = KeyToLiteral(entry.key());
    if (!key.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("at ", PathString(path), ": ", key.status().message()));
    }
    entries.emplace_back(*std::move(key), entry.value());
  }
  // Check once that every key is comparable; then sorting cannot fail.
  for (size_t i = 1; i < entries.size(); ++i) {
    auto less = LiteralLess(entries[0].first, entries[i].first);
    if (!less.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("at ", PathString(path), ": ", less.status().message()));
    }
  }
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    return LiteralLess(a.first, b.first).value_or(false);
  });
  return entries;
}

absl::Status TooDeep(const Path& path) {
  return absl::OutOfRangeError(absl::StrCat(
      "tree deeper than ", kMaxDepth, " levels at ", PathString(path),
      " (does a container contain itself?)"));
}

// The node kind of an IValue; sets *def for registered classes.
NodeKind Classify(const c10::IValue& v, bool none_is_leaf, const IValueNodeDef** def) {
  if (v.isNone()) return none_is_leaf ? NodeKind::kLeaf : NodeKind::kNone;
  if (v.isTuple()) return NodeKind::kTuple;
  if (v.isList()) return NodeKind::kList;
  if (v.isGenericDict()) return NodeKind::kDict;
  if (v.isObject() && (*def = FindIValueNode(v.type()->str())) != nullptr) {
    return NodeKind::kCustom;
  }
  return NodeKind::kLeaf;
}

class Flattener {
 public:
  Flattener(bool none_is_leaf, bool with_paths)
      : none_is_leaf_(none_is_leaf), with_paths_(with_paths) {}

  absl::Status Walk(const c10::IValue& v) {
    if (path_.size() > static_cast<size_t>(kMaxDepth)) return TooDeep(path_);
    const IValueNodeDef* def = nullptr;
    switch (Classify(v, none_is_leaf_, &def)) {
      case NodeKind::kNone:
        AppendNode(&nodes_, NodeKind::kNone, 0, nullptr);
        break;
      case NodeKind::kTuple: {
        const auto& elements = v.toTupleRef().elements();
        for (size_t i = 0; i < elements.size(); ++i) {
          if (auto s = Child(Index(i), elements[i]); !s.ok()) return s;
        }
        AppendNode(&nodes_, NodeKind::kTuple, elements.size(), nullptr);
        break;
      }
      case NodeKind::kList: {
        c10::List<c10::IValue> list = v.toList();
        for (size_t i = 0; i < list.size(); ++i) {
          if (auto s = Child(Index(i), list.get(i)); !s.ok()) return s;
        }
        AppendNode(&nodes_, NodeKind::kList, list.size(), nullptr);
        break;
      }
      case NodeKind::kDict: {
        auto entries = SortedEntries(v.toGenericDict(), path_);
        if (!entries.ok()) return entries.status();
        std::vector<Literal> keys;
        for (const auto& [key, value] : *entries) {
          if (auto s = Child(key, value); !s.ok()) return s;
          keys.push_back(key);
        }
        const int32_t arity = static_cast<int32_t>(keys.size());
        AppendNode(&nodes_, NodeKind::kDict, arity,
                   std::make_shared<const LiteralNodeData>("", std::move(keys)));
        break;
      }
      case NodeKind::kCustom: {
        Literal context;
        std::vector<c10::IValue> children = def->flatten(v, &context);
        for (size_t i = 0; i < children.size(); ++i) {
          if (auto s = Child(Index(i), children[i]); !s.ok()) return s;
        }
        std::vector<Literal> values = {std::move(context)};
        AppendNode(&nodes_, NodeKind::kCustom, children.size(),
                   std::make_shared<const LiteralNodeData>(v.type()->str(),
                                                           std::move(values)));
        break;
      }
      default:
        AppendNode(&nodes_, NodeKind::kLeaf, 0, nullptr);
        leaves_.push_back(v);
        if (with_paths_) paths_.push_back(path_);
    }
    return absl::OkStatus();
  }

  FlatIValue Finish() {
    return FlatIValue{std::move(leaves_),
                      std::make_shared<const TreeSpec>(std::move(nodes_),
                                                       none_is_leaf_, ""),
                      std::move(paths_)};
  }

 private:
  absl::Status Child(Literal segment, const c10::IValue& child) {
    path_.push_back(std::move(segment));
    absl::Status s = Walk(child);
    path_.pop_back();
    return s;
  }

  bool none_is_leaf_;
  bool with_paths_;
  std::vector<Node> nodes_;
  std::vector<c10::IValue> leaves_;
  std::vector<Path> paths_;
  Path path_;
};

// What a tree has at some place, in words, for mismatch messages.
std::string Describe(const c10::IValue& v, bool none_is_leaf) {
  const IValueNodeDef* def = nullptr;
  switch (Classify(v, none_is_leaf, &def)) {
    case NodeKind::kNone: return "None";
    case NodeKind::kTuple:
      return absl::StrCat("a tuple of ", v.toTupleRef().elements().size(), " items");
    case NodeKind::kList: return absl::StrCat("a list of ", v.toList().size(), " items");
    case NodeKind::kDict: {
      std::vector<std::string> keys;
      for (const auto& entry : v.toGenericDict()) {
        auto key = KeyToLiteral(entry.key());
        keys.push_back(key.ok() ? LiteralRepr(*key) : "?");
      }
      std::sort(keys.begin(), keys.end());
      return absl::StrCat("a dict with keys [", absl::StrJoin(keys, ", "), "]");
    }
    case NodeKind::kCustom: return absl::StrCat("a custom node ", v.type()->str());
    default: return absl::StrCat("a leaf (", v.tagKind(), ")");
  }
}

std::string Describe(const TreeSpec& spec, int index) {
  const Node& node = spec.nodes()[index];
  switch (node.kind) {
    case NodeKind::kLeaf: return "a leaf";
    case NodeKind::kNone: return "None";
    case NodeKind::kDict: {
      std::vector<std::string> keys;
      for (const Literal& k : DataOf(node).values()) keys.push_back(LiteralRepr(k));
      return absl::StrCat("a dict with keys [", absl::StrJoin(keys, ", "), "]");
    }
    case NodeKind::kCustom:
      return absl::StrCat("a custom node ", DataOf(node).type_name());
    default:
      return absl::StrCat("a ", KindName(node.kind), " of ", node.arity, " items");
  }
}

class Matcher {
 public:
  explicit Matcher(const TreeSpec& spec) : spec_(spec) {}

  absl::Status Walk(int index, const c10::IValue& v) {
    if (path_.size() > static_cast<size_t>(kMaxDepth)) return TooDeep(path_);
    const Node& node = spec_.nodes()[index];
    const bool none_is_leaf = spec_.none_is_leaf();
    bool ok = false;
    std::vector<c10::IValue> children;
    std::vector<Literal> segments;
    const IValueNodeDef* def = nullptr;
    const NodeKind kind = Classify(v, none_is_leaf, &def);
    switch (kind == node.kind ? kind : NodeKind::kLeaf) {
      case NodeKind::kLeaf:
        ok = kind == node.kind;
        if (ok) leaves_.push_back(v);
        break;
      case NodeKind::kNone: ok = true; break;
      case NodeKind::kTuple:
        ok = v.toTupleRef().elements().size() == size_t(node.arity);
        if (ok) children = v.toTupleRef().elements().vec();
        break;
      case NodeKind::kList:
        ok = v.toList().size() == size_t(node.arity);
        if (ok) children = v.toList().vec();
        break;
      case NodeKind::kDict: {
        if (v.toGenericDict().size() != size_t(node.arity)) break;
        c10::impl::GenericDict dict = v.toGenericDict();
        ok = true;
        for (const Literal& key : DataOf(node).values()) {
          auto it = dict.find(LiteralToKey(key));
          if (it == dict.end()) {
            ok = false;
            break;
          }
          children.push_back(it->value());
          segments.push_back(key);
        }
        break;
      }
      case NodeKind::kCustom: {
        if (v.type()->str() != DataOf(node).type_name()) break;
        Literal context;
        children = def->flatten(v, &context);
        ok = children.size() == size_t(node.arity) &&
             DataOf(node).values() == std::vector<Literal>{context};
        break;
      }
      default: break;
    }
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tree structures differ at ", PathString(path_), ": expected ",
          Describe(spec_, index), ", got ", Describe(v, none_is_leaf)));
    }
    std::vector<int> child_index = spec_.ChildIndices(index);
    for (size_t i = 0; i < children.size(); ++i) {
      path_.push_back(segments.empty() ? Index(i) : segments[i]);
      absl::Status s = Walk(child_index[i], children[i]);
      path_.pop_back();
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

  std::vector<c10::IValue> TakeLeaves() { return std::move(leaves_); }

 private:
  const TreeSpec& spec_;
  std::vector<c10::IValue> leaves_;
  Path path_;
};

// The element type shared by all `values`, or Any.
c10::TypePtr CommonType(const std::vector<c10::IValue>& values) {
  if (values.empty()) return c10::AnyType::get();
  c10::TypePtr type = values[0].type();
  for (const c10::IValue& v : values) {
    if (*v.type() != *type) return c10::AnyType::get();
  }
  return type;
}

absl::StatusOr<std::vector<at::Tensor>> TensorLeaves(
    const std::vector<c10::IValue>& leaves, const char* what) {
  std::vector<at::Tensor> out;
  out.reserve(leaves.size());
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (!leaves[i].isTensor()) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": leaf ", i, " is a ", leaves[i].tagKind(), ", not a Tensor"));
    }
    out.push_back(leaves[i].toTensor());
  }
  return out;
}

std::vector<c10::IValue> ToIValues(std::vector<at::Tensor> tensors) {
  return std::vector<c10::IValue>(std::make_move_iterator(tensors.begin()),
                                  std::make_move_iterator(tensors.end()));
}

// Flattens a and b (b checked against a's structure) into tensor lists.
absl::Status MatchingTensors(const c10::IValue& a, const c10::IValue& b,
                             const char* what, TreeSpecPtr* spec,
                             std::vector<at::Tensor>* ta,
                             std::vector<at::Tensor>* tb) {
  auto flat = Flatten(a);
  if (!flat.ok()) return flat.status();
  auto other = FlattenAs(*flat->spec, b);
  if (!other.ok()) return other.status();
  auto x = TensorLeaves(flat->leaves, what);
  if (!x.ok()) return x.status();
  auto y = TensorLeaves(*other, what);
  if (!y.ok()) return y.status();
  *spec = flat->spec;
  *ta = *std::move(x);
  *tb = *std::move(y);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<FlatIValue> Flatten(const c10::IValue& tree, bool none_is_leaf) {
  Flattener flattener(none_is_leaf, /*with_paths=*/false);
  if (absl::Status s = flattener.Walk(tree); !s.ok()) return s;
  return flattener.Finish();
}

absl::StatusOr<FlatIValue> FlattenWithPath(const c10::IValue& tree,
                                           bool none_is_leaf) {
  Flattener flattener(none_is_leaf, /*with_paths=*/true);
  if (absl::Status s = flattener.Walk(tree); !s.ok()) return s;
  return flattener.Finish();
}

absl::StatusOr<std::vector<c10::IValue>> FlattenAs(const TreeSpec& spec,
                                                   const c10::IValue& tree) {
  Matcher matcher(spec);
  if (absl::Status s = matcher.Walk(spec.num_nodes() - 1, tree); !s.ok()) return s;
  return matcher.TakeLeaves();
}

absl::StatusOr<c10::IValue> Unflatten(const TreeSpec& spec,
                                      std::vector<c10::IValue> leaves) {
  if (leaves.size() != static_cast<size_t>(spec.num_leaves())) {
    return absl::InvalidArgumentError(
        absl::StrCat("unflatten: the spec ", spec.ToString(), " has ",
                     spec.num_leaves(), " leaves, got ", leaves.size()));
  }
  std::vector<c10::IValue> stack;
  size_t next_leaf = 0;
  for (const Node& node : spec.nodes()) {
    std::vector<c10::IValue> children(
        std::make_move_iterator(stack.end() - node.arity),
        std::make_move_iterator(stack.end()));
    stack.resize(stack.size() - node.arity);
    switch (node.kind) {
      case NodeKind::kLeaf: stack.push_back(std::move(leaves[next_leaf++])); break;
      case NodeKind::kNone: stack.emplace_back(); break;
      case NodeKind::kTuple:
        stack.emplace_back(c10::ivalue::Tuple::create(std::move(children)));
        break;
      case NodeKind::kList: {
        c10::impl::GenericList list(CommonType(children));
        for (c10::IValue& c : children) list.push_back(std::move(c));
        stack.emplace_back(std::move(list));
        break;
      }
      case NodeKind::kDict: {
        const auto& keys = DataOf(node).values();
        std::vector<c10::IValue> key_values;
        for (const Literal& k : keys) key_values.push_back(LiteralToKey(k));
        c10::impl::GenericDict dict(CommonType(key_values), CommonType(children));
        for (size_t i = 0; i < children.size(); ++i) {
          dict.insert(key_values[i], std::move(children[i]));
        }
        stack.emplace_back(std::move(dict));
        break;
      }
      case NodeKind::kCustom: {
        const LiteralNodeData& data = DataOf(node);
        const IValueNodeDef* def = FindIValueNode(data.type_name());
        if (!def) {
          return absl::FailedPreconditionError(absl::StrCat(
              "unflatten: IValue node type ", data.type_name(),
              " is not registered (RegisterIValueNode)"));
        }
        stack.push_back(def->unflatten(data.values()[0], std::move(children)));
        break;
      }
      default:
        return absl::InvalidArgumentError(absl::StrCat(
            "unflatten: a ", KindName(node.kind),
            " node has no IValue counterpart (is this a Python spec?)"));
    }
  }
  return std::move(stack.back());
}

absl::StatusOr<std::vector<c10::IValue>> Leaves(const c10::IValue& tree,
                                                bool none_is_leaf) {
  auto flat = Flatten(tree, none_is_leaf);
  if (!flat.ok()) return flat.status();
  return std::move(flat->leaves);
}

absl::StatusOr<TreeSpecPtr> Structure(const c10::IValue& tree,
                                      bool none_is_leaf) {
  auto flat = Flatten(tree, none_is_leaf);
  if (!flat.ok()) return flat.status();
  return flat->spec;
}

namespace {

// The first tree's spec and every tree's leaves, the others checked against it.
absl::Status MatchAll(const std::vector<c10::IValue>& trees, bool none_is_leaf,
                      const char* what, TreeSpecPtr* spec,
                      std::vector<std::vector<c10::IValue>>* all) {
  if (trees.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": no trees given"));
  auto first = Flatten(trees[0], none_is_leaf);
  if (!first.ok()) return first.status();
  *spec = first->spec;
  all->push_back(std::move(first->leaves));
  for (size_t t = 1; t < trees.size(); ++t) {
    auto leaves = FlattenAs(**spec, trees[t]);
    if (!leaves.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": tree ", t, " does not match tree 0: ", leaves.status().message()));
    }
    all->push_back(*std::move(leaves));
  }
  return absl::OkStatus();
}

// Calls visit(i, args) with the i-th leaf of every tree.
template <typename Visit>
void ForEachLeaf(const std::vector<std::vector<c10::IValue>>& all, Visit visit) {
  std::vector<c10::IValue> args(all.size());
  for (size_t i = 0; i < all[0].size(); ++i) {
    for (size_t t = 0; t < all.size(); ++t) args[t] = all[t][i];
    visit(args);
  }
}

}  // namespace

absl::StatusOr<c10::IValue> Map(const IValueMapFn& fn,
                                const std::vector<c10::IValue>& trees,
                                bool none_is_leaf) {
  TreeSpecPtr spec;
  std::vector<std::vector<c10::IValue>> all;
  if (auto s = MatchAll(trees, none_is_leaf, "Map", &spec, &all); !s.ok()) return s;
  std::vector<c10::IValue> results;
  ForEachLeaf(all, [&](const std::vector<c10::IValue>& args) { results.push_back(fn(args)); });
  return Unflatten(*spec, std::move(results));
}

absl::Status MapInplace(const IValueVisitFn& fn, const std::vector<c10::IValue>& trees,
                        bool none_is_leaf) {
  TreeSpecPtr spec;
  std::vector<std::vector<c10::IValue>> all;
  if (auto s = MatchAll(trees, none_is_leaf, "MapInplace", &spec, &all); !s.ok()) return s;
  ForEachLeaf(all, fn);
  return absl::OkStatus();
}

absl::StatusOr<c10::IValue> Add(const c10::IValue& a, const c10::IValue& b,
                                const at::Scalar& alpha) {
  TreeSpecPtr spec;
  std::vector<at::Tensor> x, y;
  if (auto s = MatchingTensors(a, b, "Add", &spec, &x, &y); !s.ok()) return s;
  return Unflatten(*spec, ToIValues(AddLeaves(x, y, alpha)));
}

absl::StatusOr<c10::IValue> Sub(const c10::IValue& a, const c10::IValue& b,
                                const at::Scalar& alpha) {
  TreeSpecPtr spec;
  std::vector<at::Tensor> x, y;
  if (auto s = MatchingTensors(a, b, "Sub", &spec, &x, &y); !s.ok()) return s;
  return Unflatten(*spec, ToIValues(SubLeaves(x, y, alpha)));
}

absl::StatusOr<c10::IValue> ScalarMul(const at::Scalar& scalar,
                                      const c10::IValue& a) {
  auto flat = Flatten(a);
  if (!flat.ok()) return flat.status();
  auto x = TensorLeaves(flat->leaves, "ScalarMul");
  if (!x.ok()) return x.status();
  return Unflatten(*flat->spec, ToIValues(ScalarMulLeaves(scalar, *x)));
}

absl::StatusOr<at::Tensor> Vdot(const c10::IValue& a, const c10::IValue& b) {
  TreeSpecPtr spec;
  std::vector<at::Tensor> x, y;
  if (auto s = MatchingTensors(a, b, "Vdot", &spec, &x, &y); !s.ok()) return s;
  return VdotLeaves(x, y);
}

}  // namespace metafuse::tree
