// How a walk over a Python tree decides what is a node: the arguments every
// operation (flatten, map, flatten_as, ...) takes, gathered in one place.
#pragma once

#include <Python.h>

#include <string>

namespace metafuse::tree::python {

struct WalkOptions {
  PyObject* is_leaf = nullptr;  // borrowed; a predicate, or null
  bool none_is_leaf = false;
  std::string name_space;  // registered node types are looked up here first
};

}  // namespace metafuse::tree::python
