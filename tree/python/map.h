// map (n-ary, returns a new tree) and map_ (in place: calls func for its
// effect and returns the first tree). The first tree is flattened; every
// other tree is checked against its spec (flatten_as.h), so a structural
// difference is reported with its path before func is ever called.
#pragma once

#include <Python.h>
#include <pybind11/pybind11.h>

#include "tree/python/options.h"

namespace metafuse::tree::python {

namespace py = pybind11;

py::object Map(PyObject* func, PyObject* tree, const py::tuple& rest,
               const WalkOptions& options, bool inplace);

}  // namespace metafuse::tree::python
