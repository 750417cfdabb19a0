// flatten / flatten_with_path over Python objects, written against the
// CPython API: builtin containers are read with PyTuple/PyList/PyDict calls,
// only registered classes (and the is_leaf predicate) call back into Python.
#pragma once

#include <Python.h>
#include <pybind11/pybind11.h>

#include "tree/python/options.h"
#include "tree/tree_spec.h"

namespace metafuse::tree::python {

namespace py = pybind11;

struct FlatTree {
  py::list leaves;
  py::list paths;  // filled by FlattenWithPaths only
  TreeSpecPtr spec;
};

// Leaves in order (dicts by sorted key) and the spec. Same-shaped trees are
// matched against a cached spec first (structure_cache.h), which skips key
// sorting and spec building and returns the very same spec object.
FlatTree Flatten(PyObject* tree, const WalkOptions& options);
// Flatten plus, for every leaf, its path: a tuple of keys and indices.
FlatTree FlattenWithPaths(PyObject* tree, const WalkOptions& options);

}  // namespace metafuse::tree::python
