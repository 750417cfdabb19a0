#include "tree/serialization.h"

#include "absl/strings/str_cat.h"

namespace metafuse::tree {

namespace {

constexpr char kMagic[] = "metafuse.tree";
constexpr int64_t kVersion = 1;

bool CarriesData(NodeKind kind) {
  return kind != NodeKind::kLeaf && kind != NodeKind::kNone &&
         kind != NodeKind::kTuple && kind != NodeKind::kList;
}

absl::Status Malformed(const std::string& why) {
  return absl::InvalidArgumentError(
      absl::StrCat("not a serialized metafuse TreeSpec: ", why));
}

}  // namespace

absl::StatusOr<std::string> SerializeTreeSpec(const TreeSpec& spec) {
  std::vector<Literal> nodes;
  nodes.reserve(spec.nodes().size());
  for (const Node& node : spec.nodes()) {
    NodeRecord record;
    record.kind = node.kind;
    record.arity = node.arity;
    if (node.data) {
      absl::Status status = node.data->Serialize(&record);
      if (!status.ok()) return status;
    }
    std::vector<Literal> fields = {
        Literal::Int(static_cast<int64_t>(node.kind)), Literal::Int(node.arity),
        Literal::String(record.type_name), Literal::Tuple(record.values)};
    nodes.push_back(Literal::Tuple(std::move(fields)));
  }
  Literal top = Literal::Tuple(
      {Literal::String(kMagic), Literal::Int(kVersion),
       Literal::Bool(spec.none_is_leaf()), Literal::String(spec.name_space()),
       Literal::Tuple(std::move(nodes))});
  std::string out;
  EncodeLiteral(top, &out);
  return out;
}

absl::StatusOr<std::shared_ptr<const NodeData>> LiteralNodeDataFactory(
    const NodeRecord& record, const std::string&) {
  return std::make_shared<const LiteralNodeData>(record.type_name,
                                                 record.values);
}

absl::StatusOr<TreeSpecPtr> DeserializeTreeSpec(const std::string& text,
                                                const NodeDataFactory& factory) {
  std::string_view in(text);
  auto decoded = DecodeLiteral(&in);
  if (!decoded.ok()) return Malformed(std::string(decoded.status().message()));
  if (!in.empty()) return Malformed("trailing characters");
  const Literal& top = *decoded;
  using T = Literal::Type;
  if (top.type != T::kTuple || top.items.size() != 5 ||
      top.items[0] != Literal::String(kMagic)) {
    return Malformed("missing header");
  }
  if (top.items[1] != Literal::Int(kVersion)) {
    return Malformed(absl::StrCat("unsupported version ",
                                  LiteralRepr(top.items[1]), " (this reader: ",
                                  kVersion, ")"));
  }
  if (top.items[2].type != T::kBool || top.items[3].type != T::kString ||
      top.items[4].type != T::kTuple || top.items[4].items.empty()) {
    return Malformed("bad header fields");
  }
  const bool none_is_leaf = top.items[2].b;
  const std::string& name_space = top.items[3].s;
  std::vector<Node> nodes;
  int64_t open_subtrees = 0;  // subtrees not yet claimed by a parent
  for (const Literal& n : top.items[4].items) {
    if (n.type != T::kTuple || n.items.size() != 4 ||
        n.items[0].type != T::kInt || n.items[1].type != T::kInt ||
        n.items[2].type != T::kString || n.items[3].type != T::kTuple) {
      return Malformed("bad node record");
    }
    NodeRecord record;
    int64_t kind = n.items[0].i;
    if (kind < 0 || kind > static_cast<int64_t>(NodeKind::kCustom)) {
      return Malformed(absl::StrCat("unknown node kind ", kind));
    }
    record.kind = static_cast<NodeKind>(kind);
    record.arity = n.items[1].i;
    record.type_name = n.items[2].s;
    record.values = n.items[3].items;
    const bool childless =
        record.kind == NodeKind::kLeaf || record.kind == NodeKind::kNone;
    if (record.arity < 0 || record.arity > open_subtrees ||
        (childless && record.arity != 0)) {
      return Malformed("node arities do not form a tree");
    }
    const bool keyed = record.kind == NodeKind::kDict ||
                       record.kind == NodeKind::kOrderedDict ||
                       record.kind == NodeKind::kDefaultDict;
    if (keyed && static_cast<int64_t>(record.values.size()) != record.arity) {
      return Malformed("dict node whose key count differs from its arity");
    }
    std::shared_ptr<const NodeData> data;
    if (CarriesData(record.kind)) {
      auto made = factory(record, name_space);
      if (!made.ok()) return made.status();
      data = *std::move(made);
    }
    AppendNode(&nodes, record.kind, static_cast<int32_t>(record.arity),
               std::move(data));
    open_subtrees += 1 - record.arity;
  }
  if (open_subtrees != 1) return Malformed("more than one root");
  return std::make_shared<const TreeSpec>(std::move(nodes), none_is_leaf,
                                          name_space);
}

}  // namespace metafuse::tree
