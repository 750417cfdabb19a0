// Checking a tree against a known TreeSpec and taking its leaves, without
// building a spec: what map does for its 2nd..nth trees, what the structure
// cache does on a hit, and what the compiler does on every call of a
// compiled program (flatten_as).
#pragma once

#include <Python.h>
#include <pybind11/pybind11.h>

#include <string>

#include "tree/python/options.h"
#include "tree/tree_spec.h"

namespace metafuse::tree::python {

namespace py = pybind11;

// True, with *leaves set, when `tree` has exactly `spec`'s structure under
// `options`; false otherwise (errors raised by user code still propagate).
bool MatchSpec(const TreeSpec& spec, PyObject* tree, const WalkOptions& options,
               py::list* leaves);

// The leaves of `tree`, or ValueError "<what>: ... at tree['a'][1]: expected
// <what the spec has>, got <what the tree has>". The options come from the
// spec (none_is_leaf, namespace) plus `is_leaf`.
py::list FlattenAs(const TreeSpec& spec, PyObject* tree, PyObject* is_leaf,
                   const std::string& what);

}  // namespace metafuse::tree::python
