#include "tree/python/unflatten.h"

#include <vector>

#include "tree/python/errors.h"
#include "tree/python/py_node_data.h"
#include "tree/python/registry.h"

namespace metafuse::tree::python {

namespace {

// Moves the last `n` stack entries into a new tuple or list.
template <PyObject* (*kNew)(Py_ssize_t), void (*kSet)(PyObject*, Py_ssize_t, PyObject*)>
PyObject* PopSequence(std::vector<py::object>* stack, int n) {
  PyObject* seq = kNew(n);
  if (seq == nullptr) RethrowPythonError();
  const size_t first = stack->size() - n;
  for (int i = 0; i < n; ++i) kSet(seq, i, (*stack)[first + i].release().ptr());
  stack->resize(first);
  return seq;
}

void SetTupleItem(PyObject* t, Py_ssize_t i, PyObject* v) { PyTuple_SET_ITEM(t, i, v); }
void SetListItem(PyObject* l, Py_ssize_t i, PyObject* v) { PyList_SET_ITEM(l, i, v); }

py::tuple PopTuple(std::vector<py::object>* stack, int n) {
  return py::reinterpret_steal<py::tuple>(PopSequence<PyTuple_New, SetTupleItem>(stack, n));
}

py::object Build(const Node& node, std::vector<py::object>* stack) {
  const int n = node.arity;
  switch (node.kind) {
    case NodeKind::kNone: return py::none();
    case NodeKind::kTuple: return PopTuple(stack, n);
    case NodeKind::kList:
      return py::reinterpret_steal<py::object>(
          PopSequence<PyList_New, SetListItem>(stack, n));
    case NodeKind::kNamedTuple: {
      py::tuple args = PopTuple(stack, n);
      PyObject* out = PyObject_Call(PyDataOf(node).type.ptr(), args.ptr(), nullptr);
      if (out == nullptr) RethrowPythonError();
      return py::reinterpret_steal<py::object>(out);
    }
    case NodeKind::kCustom: {
      const PyNodeData& data = PyDataOf(node);
      py::tuple children = PopTuple(stack, n);
      PyObject* out = PyObject_CallFunctionObjArgs(
          data.unflatten_fn.ptr(), data.context.ptr(), children.ptr(), nullptr);
      if (out == nullptr) RethrowPythonError();
      return py::reinterpret_steal<py::object>(out);
    }
    default: {  // the three dict kinds
      const PyNodeData& data = PyDataOf(node);
      PyObject* dict = nullptr;
      if (node.kind == NodeKind::kDict) {
        dict = PyDict_New();
      } else if (node.kind == NodeKind::kOrderedDict) {
        dict = PyObject_CallNoArgs(
            reinterpret_cast<PyObject*>(PyRegistry::Get().ordered_dict_type()));
      } else {
        dict = PyObject_CallOneArg(
            reinterpret_cast<PyObject*>(PyRegistry::Get().default_dict_type()),
            data.context.ptr());
      }
      if (dict == nullptr) RethrowPythonError();
      py::object out = py::reinterpret_steal<py::object>(dict);
      const size_t first = stack->size() - n;
      for (int i = 0; i < n; ++i) {
        // PyObject_SetItem: OrderedDict keeps its order in __setitem__.
        PyObject* key = PyTuple_GET_ITEM(data.keys.ptr(), i);
        int rc = node.kind == NodeKind::kOrderedDict
                     ? PyObject_SetItem(dict, key, (*stack)[first + i].ptr())
                     : PyDict_SetItem(dict, key, (*stack)[first + i].ptr());
        if (rc < 0) RethrowPythonError();
      }
      stack->resize(first);
      return out;
    }
  }
}

}  // namespace

py::object Unflatten(const TreeSpec& spec, PyObject* leaves) {
  PyObject* raw = PySequence_Fast(leaves, "unflatten: leaves must be iterable");
  if (raw == nullptr) RethrowPythonError();
  py::object seq = py::reinterpret_steal<py::object>(raw);
  const Py_ssize_t count = PySequence_Fast_GET_SIZE(raw);
  if (count != spec.num_leaves()) {
    Raise(PyExc_ValueError, "unflatten: " + spec.ToString() + " has " +
                                std::to_string(spec.num_leaves()) +
                                " leaves, but " + std::to_string(count) +
                                " were given");
  }
  PyObject** items = PySequence_Fast_ITEMS(raw);
  std::vector<py::object> stack;
  stack.reserve(32);
  Py_ssize_t next_leaf = 0;
  for (const Node& node : spec.nodes()) {
    if (node.kind == NodeKind::kLeaf) {
      stack.push_back(py::reinterpret_borrow<py::object>(items[next_leaf++]));
    } else {
      stack.push_back(Build(node, &stack));
    }
  }
  return std::move(stack.back());
}

}  // namespace metafuse::tree::python
