// Which Python objects are nodes. Builtin containers are recognised by exact
// type checks (no Python calls); user classes are registered, optionally in a
// namespace, with register_node. Classify is the one decision every walk
// (flatten, flatten_as, map, all_leaves) makes at every object.
#pragma once

#include <Python.h>
#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "tree/python/options.h"
#include "tree/tree_spec.h"

namespace metafuse::tree::python {

namespace py = pybind11;

struct PyNodeDef {
  py::object type;
  py::object flatten_fn;    // obj -> (children, context[, entries])
  py::object unflatten_fn;  // (context, children) -> obj
  std::string name_space;
};

class PyRegistry {
 public:
  static PyRegistry& Get();

  // ValueError for builtin node types and for a second registration of the
  // same class in the same namespace.
  void Register(py::handle cls, py::object flatten_fn, py::object unflatten_fn,
                const std::string& name_space);
  void Unregister(py::handle cls, const std::string& name_space);
  // The definition in `name_space`, else the global one, else null.
  const PyNodeDef* Find(PyTypeObject* type, const std::string& name_space) const {
    if (defs_.empty()) return nullptr;
    auto it = defs_.find(type);
    return it == defs_.end() ? nullptr : FindIn(it->second, name_space);
  }
  bool IsNamedTuple(PyTypeObject* type);

  PyTypeObject* ordered_dict_type() const { return ordered_dict_; }
  PyTypeObject* default_dict_type() const { return default_dict_; }

 private:
  PyRegistry();
  static const PyNodeDef* FindIn(
      const std::vector<std::shared_ptr<PyNodeDef>>& defs,
      const std::string& name_space);

  absl::flat_hash_map<PyTypeObject*, std::vector<std::shared_ptr<PyNodeDef>>> defs_;
  // Tuple subclasses seen so far: namedtuple or not (types kept alive).
  absl::flat_hash_map<PyTypeObject*, bool> namedtuple_cache_;
  PyTypeObject* ordered_dict_;
  PyTypeObject* default_dict_;
};

// The node kind of `obj` (without the is_leaf predicate; see ClassifyNode).
// Sets *def for registered classes.
inline NodeKind ClassifyType(PyObject* obj, const WalkOptions& options,
                             const PyNodeDef** def) {
  if (PyTuple_CheckExact(obj)) return NodeKind::kTuple;
  if (PyList_CheckExact(obj)) return NodeKind::kList;
  if (PyDict_CheckExact(obj)) return NodeKind::kDict;
  if (obj == Py_None) return options.none_is_leaf ? NodeKind::kLeaf : NodeKind::kNone;
  PyRegistry& registry = PyRegistry::Get();
  PyTypeObject* type = Py_TYPE(obj);
  if ((*def = registry.Find(type, options.name_space)) != nullptr) return NodeKind::kCustom;
  if (type == registry.ordered_dict_type()) return NodeKind::kOrderedDict;
  if (type == registry.default_dict_type()) return NodeKind::kDefaultDict;
  if (PyTuple_Check(obj) && registry.IsNamedTuple(type)) return NodeKind::kNamedTuple;
  return NodeKind::kLeaf;
}

// What a registered flatten_fn returned, checked: children as a tuple, the
// context, and entries (a tuple as long as children) or None.
struct CustomChildren {
  py::tuple children;
  py::object context;
  py::object entries;
};
CustomChildren CallFlatten(const PyNodeDef& def, PyObject* obj);

// ClassifyType after asking the is_leaf predicate, if any (may raise).
NodeKind ClassifyNode(PyObject* obj, const WalkOptions& options,
                      const PyNodeDef** def);

}  // namespace metafuse::tree::python
