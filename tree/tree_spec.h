// TreeSpec: the structure of a pytree with its leaves taken out. It is the
// currency of the whole library: flatten produces one, unflatten consumes
// one, map checks every tree against one, and the compiler guards compiled
// programs on one. It is immutable and shared (std::shared_ptr<const ...>).
//
// Representation: the nodes in post-order (children before their parent, the
// root last). Every subtree is then a contiguous slice ending at its root,
// unflatten is a single pass with a stack, and children() is slicing.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tree/literal.h"

namespace metafuse::tree {

enum class NodeKind : uint8_t {
  kLeaf,
  kNone,  // a node with no children unless none_is_leaf
  kTuple,
  kList,
  kDict,         // keys sorted
  kOrderedDict,  // keys in insertion order
  kDefaultDict,  // keys in insertion order, plus the default factory
  kNamedTuple,
  kCustom,  // a registered node type
};

// What serialization and printing need to know about a node beyond its kind
// and arity, in plain values: dict keys, the qualified name of a namedtuple
// or custom type, a custom node's context.
struct NodeRecord {
  NodeKind kind = NodeKind::kLeaf;
  int64_t arity = 0;
  std::string type_name;        // namedtuple/custom type; defaultdict factory
  std::vector<Literal> values;  // dict keys; [context] for custom nodes
};

// Per-node payload. The Python side stores live PyObjects (keys, types,
// contexts) in a subclass; the C++ side uses LiteralNodeData below. The core
// only compares, hashes, prints and serializes it.
class NodeData {
 public:
  virtual ~NodeData() = default;
  virtual bool Equals(const NodeData& other) const = 0;
  virtual size_t Hash() const = 0;
  // Prints the node given its already printed children, e.g. {'a': *}.
  virtual std::string Format(NodeKind kind,
                             const std::vector<std::string>& children) const = 0;
  // Fills type_name and values of `record` (kind and arity are already set).
  virtual absl::Status Serialize(NodeRecord* record) const = 0;
};

// NodeData made of Literals: used by C++ trees and by deserialized specs.
class LiteralNodeData : public NodeData {
 public:
  LiteralNodeData(std::string type_name, std::vector<Literal> values)
      : type_name_(std::move(type_name)), values_(std::move(values)) {}
  const std::string& type_name() const { return type_name_; }
  const std::vector<Literal>& values() const { return values_; }

  bool Equals(const NodeData& other) const override;
  size_t Hash() const override;
  std::string Format(NodeKind kind,
                     const std::vector<std::string>& children) const override;
  absl::Status Serialize(NodeRecord* record) const override;

 private:
  std::string type_name_;
  std::vector<Literal> values_;
};

struct Node {
  NodeKind kind = NodeKind::kLeaf;
  int32_t arity = 0;       // number of children
  int32_t num_leaves = 1;  // leaves in this subtree
  int32_t num_nodes = 1;   // nodes in this subtree, itself included
  std::shared_ptr<const NodeData> data;  // null for leaf/None/tuple/list
};

// Deeper trees are refused with a clear error: it is also how cycles (a
// list that contains itself) are caught without a visited set on the hot path.
constexpr int kMaxDepth = 1000;

class TreeSpec;
using TreeSpecPtr = std::shared_ptr<const TreeSpec>;

class TreeSpec {
 public:
  // `nodes` in post-order; counts (num_leaves/num_nodes) must be filled in.
  TreeSpec(std::vector<Node> nodes, bool none_is_leaf, std::string name_space);
  static TreeSpecPtr Leaf(bool none_is_leaf = false,
                          std::string name_space = "");

  const std::vector<Node>& nodes() const { return nodes_; }
  const Node& root() const { return nodes_.back(); }
  int num_leaves() const { return root().num_leaves; }
  int num_nodes() const { return static_cast<int>(nodes_.size()); }
  int num_children() const { return root().arity; }
  bool is_leaf() const { return root().kind == NodeKind::kLeaf; }
  bool none_is_leaf() const { return none_is_leaf_; }
  const std::string& name_space() const { return namespace_; }

  // Indices (into nodes()) of the children of the node at `index`, in order.
  std::vector<int> ChildIndices(int index) const;
  // The subtree rooted at nodes()[index] as a spec of its own.
  TreeSpecPtr Subtree(int index) const;
  std::vector<TreeSpecPtr> Children() const;

  bool operator==(const TreeSpec& other) const;
  bool operator!=(const TreeSpec& other) const { return !(*this == other); }
  size_t Hash() const;
  // Readable form, e.g. TreeSpec({'a': *, 'b': [*, *]}).
  std::string ToString() const;

 private:
  std::vector<Node> nodes_;
  bool none_is_leaf_;
  std::string namespace_;
};

// Builds a node from its children's counts (the last `arity` subtrees of
// `nodes`) and appends it: the one place the post-order counts are computed.
void AppendNode(std::vector<Node>* nodes, NodeKind kind, int32_t arity,
                std::shared_ptr<const NodeData> data);

// Name of a kind for messages ("dict", "list", ...).
const char* KindName(NodeKind kind);

}  // namespace metafuse::tree
