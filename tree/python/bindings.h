// metafuse._C._tree: the Python face of tree/ (the package module
// metafuse.tree re-exports it with docstrings and argument checks).
#pragma once

#include <pybind11/pybind11.h>

namespace metafuse::tree {

// Creates the submodule `_tree` of `parent` and fills it.
void BindTree(pybind11::module_& parent);

}  // namespace metafuse::tree
