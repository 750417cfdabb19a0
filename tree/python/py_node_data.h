// The Python payload of a TreeSpec node: live objects (dict keys, the
// namedtuple or registered class, a custom node's context and unflatten
// function), compared with Python's == and printed with repr.
#pragma once

#include <Python.h>
#include <pybind11/pybind11.h>

#include "tree/serialization.h"
#include "tree/tree_spec.h"

namespace metafuse::tree::python {

namespace py = pybind11;

class PyNodeData : public NodeData {
 public:
  // dict / OrderedDict / defaultdict: keys (a tuple); defaultdict: context is
  // the default_factory. namedtuple: type. custom: type, context,
  // unflatten_fn and entries (path keys of the children, or None).
  py::object type, keys, context, unflatten_fn, entries;

  bool Equals(const NodeData& other) const override;
  size_t Hash() const override;
  std::string Format(NodeKind kind,
                     const std::vector<std::string>& children) const override;
  absl::Status Serialize(NodeRecord* record) const override;
};

inline const PyNodeData& PyDataOf(const Node& node) {
  return static_cast<const PyNodeData&>(*node.data);
}

// Reading side of serialization: resolves types by qualified name and custom
// nodes through the registry of `name_space`.
absl::StatusOr<std::shared_ptr<const NodeData>> PyNodeDataFactory(
    const NodeRecord& record, const std::string& name_space);

// a == b, where a comparison that raises (tensors or arrays as contexts)
// counts as unequal rather than failing a spec comparison or a cache lookup.
bool PyEqual(PyObject* a, PyObject* b);

// "module.QualName" of a class or function.
std::string QualifiedName(PyObject* obj);

}  // namespace metafuse::tree::python
