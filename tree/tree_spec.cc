#include "tree/tree_spec.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace metafuse::tree {

const char* KindName(NodeKind kind) {
  switch (kind) {
    case NodeKind::kLeaf: return "leaf";
    case NodeKind::kNone: return "None";
    case NodeKind::kTuple: return "tuple";
    case NodeKind::kList: return "list";
    case NodeKind::kDict: return "dict";
    case NodeKind::kOrderedDict: return "OrderedDict";
    case NodeKind::kDefaultDict: return "defaultdict";
    case NodeKind::kNamedTuple: return "namedtuple";
    case NodeKind::kCustom: return "custom node";
  }
  return "?";
}

bool LiteralNodeData::Equals(const NodeData& other) const {
  auto* o = dynamic_cast<const LiteralNodeData*>(&other);
  return o && o->type_name_ == type_name_ && o->values_ == values_;
}

size_t LiteralNodeData::Hash() const {
  size_t h = std::hash<std::string>()(type_name_);
  for (const Literal& v : values_) h = h * 31 + HashLiteral(v);
  return h;
}

namespace {

// {k1: c1, k2: c2}
std::string FormatKeyed(const std::vector<Literal>& keys,
                        const std::vector<std::string>& children) {
  std::vector<std::string> items;
  for (size_t i = 0; i < children.size() && i < keys.size(); ++i) {
    items.push_back(absl::StrCat(LiteralRepr(keys[i]), ": ", children[i]));
  }
  return absl::StrCat("{", absl::StrJoin(items, ", "), "}");
}

}  // namespace

std::string LiteralNodeData::Format(
    NodeKind kind, const std::vector<std::string>& children) const {
  switch (kind) {
    case NodeKind::kDict: return FormatKeyed(values_, children);
    case NodeKind::kOrderedDict:
      return absl::StrCat("OrderedDict(", FormatKeyed(values_, children), ")");
    case NodeKind::kDefaultDict:
      return absl::StrCat("defaultdict(", type_name_, ", ",
                          FormatKeyed(values_, children), ")");
    case NodeKind::kNamedTuple:
      return absl::StrCat(type_name_, "(", absl::StrJoin(children, ", "), ")");
    default: {
      std::string context =
          values_.empty() ? "None" : LiteralRepr(values_.front());
      return absl::StrCat("CustomTreeNode(", type_name_, "[", context, "], [",
                          absl::StrJoin(children, ", "), "])");
    }
  }
}

absl::Status LiteralNodeData::Serialize(NodeRecord* record) const {
  record->type_name = type_name_;
  record->values = values_;
  return absl::OkStatus();
}

TreeSpec::TreeSpec(std::vector<Node> nodes, bool none_is_leaf,
                   std::string name_space)
    : nodes_(std::move(nodes)),
      none_is_leaf_(none_is_leaf),
      namespace_(std::move(name_space)) {
  if (nodes_.empty()) nodes_.push_back(Node{});
}

TreeSpecPtr TreeSpec::Leaf(bool none_is_leaf, std::string name_space) {
  return std::make_shared<const TreeSpec>(std::vector<Node>{Node{}},
                                          none_is_leaf, std::move(name_space));
}

void AppendNode(std::vector<Node>* nodes, NodeKind kind, int32_t arity,
                std::shared_ptr<const NodeData> data) {
  Node node;
  node.kind = kind;
  node.arity = arity;
  node.data = std::move(data);
  if (kind == NodeKind::kLeaf) {
    nodes->push_back(std::move(node));
    return;
  }
  node.num_leaves = 0;
  // Walk back over the children's subtrees (each ends at its root).
  int index = static_cast<int>(nodes->size()) - 1;
  for (int32_t c = 0; c < arity; ++c) {
    const Node& child = (*nodes)[index];
    node.num_leaves += child.num_leaves;
    node.num_nodes += child.num_nodes;
    index -= child.num_nodes;
  }
  nodes->push_back(std::move(node));
}

std::vector<int> TreeSpec::ChildIndices(int index) const {
  const Node& node = nodes_[index];
  std::vector<int> children(node.arity);
  int child = index - 1;
  for (int c = node.arity - 1; c >= 0; --c) {
    children[c] = child;
    child -= nodes_[child].num_nodes;
  }
  return children;
}

TreeSpecPtr TreeSpec::Subtree(int index) const {
  int first = index - nodes_[index].num_nodes + 1;
  return std::make_shared<const TreeSpec>(
      std::vector<Node>(nodes_.begin() + first, nodes_.begin() + index + 1),
      none_is_leaf_, namespace_);
}

std::vector<TreeSpecPtr> TreeSpec::Children() const {
  std::vector<TreeSpecPtr> out;
  for (int child : ChildIndices(num_nodes() - 1)) out.push_back(Subtree(child));
  return out;
}

bool TreeSpec::operator==(const TreeSpec& other) const {
  if (this == &other) return true;
  if (nodes_.size() != other.nodes_.size() ||
      none_is_leaf_ != other.none_is_leaf_ || namespace_ != other.namespace_) {
    return false;
  }
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& a = nodes_[i];
    const Node& b = other.nodes_[i];
    if (a.kind != b.kind || a.arity != b.arity) return false;
    if ((a.data == nullptr) != (b.data == nullptr)) return false;
    if (a.data && a.data != b.data && !a.data->Equals(*b.data)) return false;
  }
  return true;
}

size_t TreeSpec::Hash() const {
  size_t h = std::hash<std::string>()(namespace_) ^ (none_is_leaf_ ? 0x51 : 0);
  for (const Node& n : nodes_) {
    h = h * 1000003 ^ (static_cast<size_t>(n.kind) << 24 | n.arity);
    if (n.data) h = h * 31 + n.data->Hash();
  }
  return h;
}

std::string TreeSpec::ToString() const {
  std::vector<std::string> stack;
  for (const Node& node : nodes_) {
    std::vector<std::string> children(
        std::make_move_iterator(stack.end() - node.arity),
        std::make_move_iterator(stack.end()));
    stack.resize(stack.size() - node.arity);
    switch (node.kind) {
      case NodeKind::kLeaf: stack.push_back("*"); break;
      case NodeKind::kNone: stack.push_back("None"); break;
      case NodeKind::kTuple:
        stack.push_back(absl::StrCat("(", absl::StrJoin(children, ", "),
                                     children.size() == 1 ? ",)" : ")"));
        break;
      case NodeKind::kList:
        stack.push_back(absl::StrCat("[", absl::StrJoin(children, ", "), "]"));
        break;
      default: stack.push_back(node.data->Format(node.kind, children));
    }
  }
  std::string out = absl::StrCat("TreeSpec(", stack.back());
  if (none_is_leaf_) out += ", NoneIsLeaf";
  if (!namespace_.empty()) absl::StrAppend(&out, ", namespace='", namespace_, "'");
  return out + ")";
}

}  // namespace metafuse::tree
