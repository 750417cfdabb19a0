// unflatten: rebuilds a Python tree from a spec and its leaves in one pass
// over the post-order nodes, with a stack of finished subtrees.
#pragma once

#include <Python.h>
#include <pybind11/pybind11.h>

#include "tree/tree_spec.h"

namespace metafuse::tree::python {

namespace py = pybind11;

// `leaves`: any iterable of exactly spec.num_leaves() objects (ValueError
// otherwise). Dicts come back in sorted key order, OrderedDict and
// defaultdict in their recorded order.
py::object Unflatten(const TreeSpec& spec, PyObject* leaves);

}  // namespace metafuse::tree::python
