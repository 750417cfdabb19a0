#include "tree/python/registry.h"

#include "tree/python/errors.h"

namespace metafuse::tree::python {

PyRegistry& PyRegistry::Get() {
  // Never destroyed: it holds Python objects, which must not be released
  // after the interpreter is gone.
  static PyRegistry* registry = new PyRegistry;
  return *registry;
}

PyRegistry::PyRegistry() {
  py::module_ collections = py::module_::import("collections");
  ordered_dict_ = reinterpret_cast<PyTypeObject*>(
      py::object(collections.attr("OrderedDict")).release().ptr());
  default_dict_ = reinterpret_cast<PyTypeObject*>(
      py::object(collections.attr("defaultdict")).release().ptr());
}

const PyNodeDef* PyRegistry::FindIn(
    const std::vector<std::shared_ptr<PyNodeDef>>& defs,
    const std::string& name_space) {
  const PyNodeDef* global = nullptr;
  for (const auto& def : defs) {
    if (def->name_space == name_space) return def.get();
    if (def->name_space.empty()) global = def.get();
  }
  return global;
}

void PyRegistry::Register(py::handle cls, py::object flatten_fn,
                          py::object unflatten_fn,
                          const std::string& name_space) {
  if (!PyType_Check(cls.ptr())) {
    Raise(PyExc_TypeError, "register_node: cls must be a class, got " + Repr(cls.ptr()));
  }
  PyTypeObject* type = reinterpret_cast<PyTypeObject*>(cls.ptr());
  if (type == &PyTuple_Type || type == &PyList_Type || type == &PyDict_Type ||
      type == Py_TYPE(Py_None) || type == ordered_dict_ || type == default_dict_) {
    Raise(PyExc_ValueError, "register_node: " + Repr(cls.ptr()) +
                                " is a builtin node type and cannot be re-registered");
  }
  if (!PyCallable_Check(flatten_fn.ptr()) || !PyCallable_Check(unflatten_fn.ptr())) {
    Raise(PyExc_TypeError, "register_node: flatten_fn and unflatten_fn must be callable");
  }
  auto& defs = defs_[type];
  for (const auto& def : defs) {
    if (def->name_space == name_space) {
      Raise(PyExc_ValueError,
            "register_node: " + Repr(cls.ptr()) + " is already registered in " +
                (name_space.empty() ? std::string("the global namespace")
                                    : "namespace '" + name_space + "'"));
    }
  }
  auto def = std::make_shared<PyNodeDef>();
  def->type = py::reinterpret_borrow<py::object>(cls);
  def->flatten_fn = std::move(flatten_fn);
  def->unflatten_fn = std::move(unflatten_fn);
  def->name_space = name_space;
  defs.push_back(std::move(def));
}

void PyRegistry::Unregister(py::handle cls, const std::string& name_space) {
  auto it = defs_.find(reinterpret_cast<PyTypeObject*>(cls.ptr()));
  if (it != defs_.end()) {
    auto& defs = it->second;
    for (auto d = defs.begin(); d != defs.end(); ++d) {
      if ((*d)->name_space == name_space) {
        defs.erase(d);
        if (defs.empty()) defs_.erase(it);
        return;
      }
    }
  }
  Raise(PyExc_ValueError, "unregister_node: " + Repr(cls.ptr()) +
                              " is not registered in namespace '" + name_space + "'");
}

bool PyRegistry::IsNamedTuple(PyTypeObject* type) {
  auto it = namedtuple_cache_.find(type);
  if (it != namedtuple_cache_.end()) return it->second;
  PyObject* fields = PyObject_GetAttrString(reinterpret_cast<PyObject*>(type), "_fields");
  bool is_namedtuple = fields != nullptr && PyTuple_Check(fields);
  Py_XDECREF(fields);
  PyErr_Clear();
  Py_INCREF(type);  // the cache keys must not be freed and reused
  namedtuple_cache_.emplace(type, is_namedtuple);
  return is_namedtuple;
}

NodeKind ClassifyNode(PyObject* obj, const WalkOptions& options,
                      const PyNodeDef** def) {
  if (options.is_leaf != nullptr) {
    PyObject* answer = PyObject_CallOneArg(options.is_leaf, obj);
    if (answer == nullptr) RethrowPythonError();
    int truth = PyObject_IsTrue(answer);
    Py_DECREF(answer);
    if (truth < 0) RethrowPythonError();
    if (truth) return NodeKind::kLeaf;
  }
  return ClassifyType(obj, options, def);
}

}  // namespace metafuse::tree::python

namespace metafuse::tree::python {

CustomChildren CallFlatten(const PyNodeDef& def, PyObject* obj) {
  // Held locally: the call may run code that unregisters `def`.
  py::object type = def.type, flatten_fn = def.flatten_fn;
  PyObject* raw = PyObject_CallOneArg(flatten_fn.ptr(), obj);
  if (raw == nullptr) RethrowPythonError();
  py::object result = py::reinterpret_steal<py::object>(raw);
  auto bad = [&](const std::string& why) {
    Raise(PyExc_TypeError,
          "the flatten_fn registered for " + Repr(type.ptr()) + " returned " +
              Repr(result.ptr()) + "; expected (children, context) or "
              "(children, context, entries)" + why);
  };
  if (!PyTuple_Check(raw) || (PyTuple_GET_SIZE(raw) != 2 && PyTuple_GET_SIZE(raw) != 3)) {
    bad("");
  }
  CustomChildren out;
  PyObject* children = PySequence_Tuple(PyTuple_GET_ITEM(raw, 0));
  if (children == nullptr) {
    PyErr_Clear();
    bad(" with children an iterable");
  }
  out.children = py::reinterpret_steal<py::tuple>(children);
  out.context = py::reinterpret_borrow<py::object>(PyTuple_GET_ITEM(raw, 1));
  out.entries = py::none();
  if (PyTuple_GET_SIZE(raw) == 3 && PyTuple_GET_ITEM(raw, 2) != Py_None) {
    PyObject* entries = PySequence_Tuple(PyTuple_GET_ITEM(raw, 2));
    if (entries == nullptr) {
      PyErr_Clear();
      bad(" with entries an iterable");
    }
    out.entries = py::reinterpret_steal<py::object>(entries);
    if (PyTuple_GET_SIZE(entries) != PyTuple_GET_SIZE(children)) {
      bad(" with as many entries as children");
    }
  }
  return out;
}

}  // namespace metafuse::tree::python
