#include "tree/python/flatten_as.h"

#include "absl/container/inlined_vector.h"
#include "tree/python/errors.h"
#include "tree/python/py_node_data.h"
#include "tree/python/registry.h"

namespace metafuse::tree::python {

namespace {

class Matcher {
 public:
  Matcher(const TreeSpec& spec, const WalkOptions& options, const std::string* what)
      : spec_(spec), options_(options), what_(what) {
    leaves = py::reinterpret_steal<py::list>(PyList_New(spec.num_leaves()));
  }

  bool Walk(int index, PyObject* obj) {
    if (path_.depth() >= static_cast<size_t>(kMaxDepth)) path_.RaiseTooDeep(obj);
    const Node& node = spec_.nodes()[index];
    const PyNodeDef* def = nullptr;
    const NodeKind kind = ClassifyNode(obj, options_, &def);
    if (kind != node.kind) return Mismatch(index, obj);
    switch (kind) {
      case NodeKind::kLeaf:
        Py_INCREF(obj);
        PyList_SET_ITEM(leaves.ptr(), next_leaf_++, obj);
        return true;
      case NodeKind::kNone:
        return true;
      case NodeKind::kNamedTuple:
        if (reinterpret_cast<PyObject*>(Py_TYPE(obj)) != PyDataOf(node).type.ptr()) {
          return Mismatch(index, obj);
        }
        [[fallthrough]];
      case NodeKind::kTuple: {
        if (PyTuple_GET_SIZE(obj) != node.arity) return Mismatch(index, obj);
        auto children = Children(index);
        for (int i = 0; i < node.arity; ++i) {
          if (!Child(children[i], PyTuple_GET_ITEM(obj, i), obj, i)) return false;
        }
        return true;
      }
      case NodeKind::kList: {
        if (PyList_GET_SIZE(obj) != node.arity) return Mismatch(index, obj);
        auto children = Children(index);
        for (int i = 0; i < node.arity; ++i) {
          if (i >= PyList_GET_SIZE(obj)) return Mismatch(index, obj);
          py::object item = py::reinterpret_borrow<py::object>(PyList_GET_ITEM(obj, i));
          if (!Child(children[i], item.ptr(), obj, i)) return false;
        }
        return true;
      }
      case NodeKind::kDict:
      case NodeKind::kOrderedDict:
      case NodeKind::kDefaultDict:
        return WalkDict(index, obj);
      case NodeKind::kCustom:
        return WalkCustom(index, obj, *def);
    }
    return false;
  }

  py::list leaves;

 private:
  absl::InlinedVector<int, 16> Children(int index) const {
    const auto& nodes = spec_.nodes();
    absl::InlinedVector<int, 16> children(nodes[index].arity);
    int child = index - 1;
    for (int c = nodes[index].arity - 1; c >= 0; --c) {
      children[c] = child;
      child -= nodes[child].num_nodes;
    }
    return children;
  }

  bool Child(int index, PyObject* obj, PyObject* parent, Py_ssize_t position) {
    path_.PushIndex(position, parent);
    bool ok = Walk(index, obj);
    path_.Pop();
    return ok;
  }

  bool WalkDict(int index, PyObject* obj) {
    const Node& node = spec_.nodes()[index];
    const PyNodeData& data = PyDataOf(node);
    PyObject* keys = data.keys.ptr();
    if (PyDict_GET_SIZE(obj) != node.arity) return Mismatch(index, obj);
    if (node.kind == NodeKind::kDefaultDict) {
      py::object factory = py::reinterpret_borrow<py::object>(obj).attr("default_factory");
      if (!PyEqual(factory.ptr(), data.context.ptr())) return Mismatch(index, obj);
    }
    if (node.kind != NodeKind::kDict) {
      // Insertion order is part of the structure of ordered dicts.
      PyObject* raw = node.kind == NodeKind::kOrderedDict ? PySequence_List(obj)
                                                          : PyDict_Keys(obj);
      if (raw == nullptr) RethrowPythonError();
      py::object order = py::reinterpret_steal<py::object>(raw);
      if (PyList_GET_SIZE(raw) != node.arity) return Mismatch(index, obj);
      for (int i = 0; i < node.arity; ++i) {
        if (!PyEqual(PyList_GET_ITEM(raw, i), PyTuple_GET_ITEM(keys, i))) {
          return Mismatch(index, obj);
        }
      }
    }
    auto children = Children(index);
    for (int i = 0; i < node.arity; ++i) {
      PyObject* key = PyTuple_GET_ITEM(keys, i);
      PyObject* value = PyDict_GetItemWithError(obj, key);
      if (value == nullptr) {
        if (PyErr_Occurred()) RethrowPythonError();
        return Mismatch(index, obj);
      }
      py::object held = py::reinterpret_borrow<py::object>(value);
      path_.PushKey(key, obj);
      bool ok = Walk(children[i], value);
      path_.Pop();
      if (!ok) return false;
    }
    return true;
  }

  bool WalkCustom(int index, PyObject* obj, const PyNodeDef& def) {
    const Node& node = spec_.nodes()[index];
    const PyNodeData& data = PyDataOf(node);
    if (def.type.ptr() != data.type.ptr()) return Mismatch(index, obj);
    CustomChildren flat = CallFlatten(def, obj);
    if (PyTuple_GET_SIZE(flat.children.ptr()) != node.arity) return Mismatch(index, obj);
    if (!PyEqual(flat.context.ptr(), data.context.ptr())) return Mismatch(index, obj);
    auto children = Children(index);
    const bool has_entries = !flat.entries.is_none();
    for (int i = 0; i < node.arity; ++i) {
      if (has_entries) {
        path_.PushKey(PyTuple_GET_ITEM(flat.entries.ptr(), i), obj);
      } else {
        path_.PushIndex(i, obj);
      }
      bool ok = Walk(children[i], PyTuple_GET_ITEM(flat.children.ptr(), i));
      path_.Pop();
      if (!ok) return false;
    }
    return true;
  }

  bool Mismatch(int index, PyObject* obj) {
    if (what_ == nullptr) return false;
    Raise(PyExc_ValueError, *what_ + ": tree structures differ at " + path_.Format() +
                                ": expected " + DescribeNode(spec_, index) + ", got " +
                                DescribeObject(obj, options_));
  }

  const TreeSpec& spec_;
  const WalkOptions& options_;
  const std::string* what_;  // null: report mismatches by returning false
  PathTracker path_;
  Py_ssize_t next_leaf_ = 0;
};

}  // namespace

bool MatchSpec(const TreeSpec& spec, PyObject* tree, const WalkOptions& options,
               py::list* leaves) {
  Matcher matcher(spec, options, nullptr);
  if (!matcher.Walk(spec.num_nodes() - 1, tree)) return false;
  *leaves = std::move(matcher.leaves);
  return true;
}

py::list FlattenAs(const TreeSpec& spec, PyObject* tree, PyObject* is_leaf,
                   const std::string& what) {
  WalkOptions options;
  options.is_leaf = is_leaf;
  options.none_is_leaf = spec.none_is_leaf();
  options.name_space = spec.name_space();
  Matcher matcher(spec, options, &what);
  matcher.Walk(spec.num_nodes() - 1, tree);
  return std::move(matcher.leaves);
}

}  // namespace metafuse::tree::python
