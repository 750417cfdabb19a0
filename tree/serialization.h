// Stable text serialization of a TreeSpec, for ahead-of-time artifacts and
// caches that outlive a process. The text is one encoded Literal:
//   ("metafuse.tree", 1, none_is_leaf, namespace, ((kind, arity, type, values), ...))
// with the nodes in post-order. Live Python objects do not survive it: dict
// keys and contexts must be plain values (str/int/float/bool/None/tuple),
// types travel by qualified name and are resolved by the reader's factory.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "tree/tree_spec.h"

namespace metafuse::tree {

absl::StatusOr<std::string> SerializeTreeSpec(const TreeSpec& spec);

// Turns a decoded node record into the NodeData of the reading side (Python
// objects, or LiteralNodeData for C++). Called only for nodes that carry data.
using NodeDataFactory =
    std::function<absl::StatusOr<std::shared_ptr<const NodeData>>(
        const NodeRecord& record, const std::string& name_space)>;

// The C++ factory: every node becomes a LiteralNodeData.
absl::StatusOr<std::shared_ptr<const NodeData>> LiteralNodeDataFactory(
    const NodeRecord& record, const std::string& name_space);

absl::StatusOr<TreeSpecPtr> DeserializeTreeSpec(
    const std::string& text,
    const NodeDataFactory& factory = LiteralNodeDataFactory);

}  // namespace metafuse::tree
