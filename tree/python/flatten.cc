#include "tree/python/flatten.h"

#include "tree/python/errors.h"
#include "tree/python/flatten_as.h"
#include "tree/python/py_node_data.h"
#include "tree/python/registry.h"
#include "tree/python/structure_cache.h"

namespace metafuse::tree::python {

namespace {

template <bool kPaths>
class Flattener {
 public:
  explicit Flattener(const WalkOptions& options) : options_(options) {}

  void Walk(PyObject* obj) {
    if (path_.depth() >= static_cast<size_t>(kMaxDepth)) path_.RaiseTooDeep(obj);
    const PyNodeDef* def = nullptr;
    const NodeKind kind = ClassifyNode(obj, options_, &def);
    switch (kind) {
      case NodeKind::kLeaf:
        nodes.emplace_back();
        if (PyList_Append(leaves.ptr(), obj) < 0) RethrowPythonError();
        if constexpr (kPaths) {
          if (PyList_Append(paths.ptr(), path_.AsTuple().ptr()) < 0) RethrowPythonError();
        }
        return;
      case NodeKind::kNone:
        AppendNode(&nodes, kind, 0, nullptr);
        return;
      case NodeKind::kTuple:
      case NodeKind::kNamedTuple: {
        const Py_ssize_t n = PyTuple_GET_SIZE(obj);
        for (Py_ssize_t i = 0; i < n; ++i) {
          path_.PushIndex(i, obj);
          Walk(PyTuple_GET_ITEM(obj, i));
          path_.Pop();
        }
        std::shared_ptr<PyNodeData> data;
        if (kind == NodeKind::kNamedTuple) {
          data = std::make_shared<PyNodeData>();
          data->type = py::reinterpret_borrow<py::object>(
              reinterpret_cast<PyObject*>(Py_TYPE(obj)));
        }
        AppendNode(&nodes, kind, static_cast<int32_t>(n), std::move(data));
        return;
      }
      case NodeKind::kList: {
        const Py_ssize_t n = PyList_GET_SIZE(obj);
        for (Py_ssize_t i = 0; i < n; ++i) {
          if (i >= PyList_GET_SIZE(obj)) {
            Raise(PyExc_RuntimeError, "the list at " + path_.Format() +
                                          " changed size while it was flattened");
          }
          // Held: an is_leaf predicate could mutate the list under us.
          py::object item = py::reinterpret_borrow<py::object>(PyList_GET_ITEM(obj, i));
          path_.PushIndex(i, obj);
          Walk(item.ptr());
          path_.Pop();
        }
        AppendNode(&nodes, kind, static_cast<int32_t>(n), nullptr);
        return;
      }
      case NodeKind::kDict:
      case NodeKind::kOrderedDict:
      case NodeKind::kDefaultDict:
        WalkDict(obj, kind);
        return;
      case NodeKind::kCustom:
        WalkCustom(obj, *def);
        return;
    }
  }

  std::vector<Node> nodes;
  py::list leaves;
  py::list paths;

 private:
  void WalkDict(PyObject* obj, NodeKind kind) {
    // OrderedDict order lives in the OrderedDict, not in the dict below it.
    PyObject* raw_keys =
        kind == NodeKind::kOrderedDict ? PySequence_List(obj) : PyDict_Keys(obj);
    if (raw_keys == nullptr) RethrowPythonError();
    py::object keys = py::reinterpret_steal<py::object>(raw_keys);
    if (kind == NodeKind::kDict && PyList_Sort(raw_keys) < 0) {
      std::string why = "?";
      if (PyErr_ExceptionMatches(PyExc_TypeError)) {
        py::error_already_set error;
        why = error.what();
      }
      Raise(PyExc_TypeError,
            "cannot sort the keys of the dict at " + path_.Format() + " (" + why +
                "); a dict's keys must be mutually comparable, since dicts "
                "flatten in sorted key order (an OrderedDict keeps insertion order)");
    }
    const Py_ssize_t n = PyList_GET_SIZE(raw_keys);
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyObject* key = PyList_GET_ITEM(raw_keys, i);
      PyObject* value = PyDict_GetItemWithError(obj, key);
      if (value == nullptr) {
        if (PyErr_Occurred()) RethrowPythonError();
        Raise(PyExc_RuntimeError, "the dict at " + path_.Format() +
                                      " changed while it was flattened");
      }
      py::object held = py::reinterpret_borrow<py::object>(value);
      path_.PushKey(key, obj);
      Walk(value);
      path_.Pop();
    }
    auto data = std::make_shared<PyNodeData>();
    data->keys = py::reinterpret_steal<py::object>(PyList_AsTuple(raw_keys));
    if (kind == NodeKind::kDefaultDict) {
      data->context = py::reinterpret_borrow<py::object>(obj).attr("default_factory");
    }
    AppendNode(&nodes, kind, static_cast<int32_t>(n), std::move(data));
  }

  void WalkCustom(PyObject* obj, const PyNodeDef& def) {
    // Copied first: flatten_fn may unregister `def` while it runs.
    auto data = std::make_shared<PyNodeData>();
    data->type = def.type;
    data->unflatten_fn = def.unflatten_fn;
    CustomChildren flat = CallFlatten(def, obj);
    const Py_ssize_t n = PyTuple_GET_SIZE(flat.children.ptr());
    const bool has_entries = !flat.entries.is_none();
    for (Py_ssize_t i = 0; i < n; ++i) {
      if (has_entries) {
        path_.PushKey(PyTuple_GET_ITEM(flat.entries.ptr(), i), obj);
      } else {
        path_.PushIndex(i, obj);
      }
      Walk(PyTuple_GET_ITEM(flat.children.ptr(), i));
      path_.Pop();
    }
    data->context = std::move(flat.context);
    data->entries = std::move(flat.entries);
    AppendNode(&nodes, NodeKind::kCustom, static_cast<int32_t>(n), std::move(data));
  }

  const WalkOptions& options_;
  PathTracker path_;
};

template <bool kPaths>
FlatTree Run(PyObject* tree, const WalkOptions& options) {
  Flattener<kPaths> flattener(options);
  flattener.Walk(tree);
  FlatTree out;
  out.leaves = std::move(flattener.leaves);
  out.paths = std::move(flattener.paths);
  out.spec = std::make_shared<const TreeSpec>(std::move(flattener.nodes),
                                              options.none_is_leaf,
                                              options.name_space);
  return out;
}

}  // namespace

FlatTree Flatten(PyObject* tree, const WalkOptions& options) {
  // The cache is keyed by the root's type; leaves at the root and
  // predicate-driven flattens (the predicate may be stateful) bypass it.
  StructureCache& cache = StructureCache::Get();
  const bool cacheable = options.is_leaf == nullptr && cache.enabled() &&
                         (PyTuple_Check(tree) || PyList_CheckExact(tree) ||
                          PyDict_Check(tree));
  if (cacheable) {
    if (TreeSpecPtr spec = cache.Find(Py_TYPE(tree), options)) {
      FlatTree out;
      if (MatchSpec(*spec, tree, options, &out.leaves)) {
        cache.CountHit();
        out.spec = std::move(spec);
        return out;
      }
    }
  }
  FlatTree out = Run<false>(tree, options);
  if (cacheable) cache.Store(Py_TYPE(tree), options, out.spec);
  return out;
}

FlatTree FlattenWithPaths(PyObject* tree, const WalkOptions& options) {
  return Run<true>(tree, options);
}

}  // namespace metafuse::tree::python
