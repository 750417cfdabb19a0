#include "tree/python/map.h"

#include <vector>

#include "tree/python/errors.h"
#include "tree/python/flatten.h"
#include "tree/python/flatten_as.h"
#include "tree/python/unflatten.h"

namespace metafuse::tree::python {

namespace {

std::string Ordinal(size_t i) {
  static const char* kSuffix[] = {"th", "st", "nd", "rd"};
  size_t mod = i % 10;
  const char* suffix = (i % 100 >= 11 && i % 100 <= 13) || mod > 3 ? "th" : kSuffix[mod];
  return std::to_string(i) + suffix;
}

}  // namespace

py::object Map(PyObject* func, PyObject* tree, const py::tuple& rest,
               const WalkOptions& options, bool inplace) {
  FlatTree first = Flatten(tree, options);
  const size_t num_trees = 1 + rest.size();
  std::vector<py::list> others;
  others.reserve(rest.size());
  for (size_t t = 0; t < rest.size(); ++t) {
    others.push_back(FlattenAs(*first.spec, rest[t].ptr(), options.is_leaf,
                               std::string(inplace ? "map_" : "map") + ": the " +
                                   Ordinal(t + 2) + " tree does not match the first"));
  }
  const Py_ssize_t n = first.spec->num_leaves();
  py::list results;
  if (!inplace) results = py::reinterpret_steal<py::list>(PyList_New(n));
  std::vector<PyObject*> args(num_trees);
  for (Py_ssize_t i = 0; i < n; ++i) {
    args[0] = PyList_GET_ITEM(first.leaves.ptr(), i);
    for (size_t t = 1; t < num_trees; ++t) {
      args[t] = PyList_GET_ITEM(others[t - 1].ptr(), i);
    }
    PyObject* out = PyObject_Vectorcall(func, args.data(), num_trees, nullptr);
    if (out == nullptr) RethrowPythonError();
    if (inplace) {
      Py_DECREF(out);
    } else {
      PyList_SET_ITEM(results.ptr(), i, out);
    }
  }
  if (inplace) return py::reinterpret_borrow<py::object>(tree);
  return Unflatten(*first.spec, results.ptr());
}

}  // namespace metafuse::tree::python
