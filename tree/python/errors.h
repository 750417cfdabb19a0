// Error reporting for Python trees: the path of the node being visited (kept
// as borrowed pointers and indices, formatted only when something fails),
// descriptions of what a tree or a spec has at a place, and raising Python
// exceptions from C++ (pybind11 turns error_already_set back into them).
#pragma once

#include <Python.h>
#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "tree/python/options.h"
#include "tree/tree_spec.h"

namespace metafuse::tree::python {

namespace py = pybind11;

// Sets the Python error and throws, so the C++ walk unwinds cleanly.
[[noreturn]] void Raise(PyObject* exception_type, const std::string& message);
// Throws when a Python error is already set (after a failed C-API call).
[[noreturn]] void RethrowPythonError();

// repr(obj), never throwing (falls back to "<unprintable>").
std::string Repr(PyObject* obj);

class PathTracker {
 public:
  // `key` is borrowed: the caller keeps it alive while the child is visited.
  void PushKey(PyObject* key, PyObject* container) {
    entries_.push_back({key, -1});
    containers_.push_back(container);
  }
  void PushIndex(Py_ssize_t index, PyObject* container) {
    entries_.push_back({nullptr, index});
    containers_.push_back(container);
  }
  void Pop() {
    entries_.pop_back();
    containers_.pop_back();
  }
  size_t depth() const { return entries_.size(); }

  // "tree['a'][0]"
  std::string Format(const char* root = "tree") const;
  // ('a', 0): the path of a leaf for flatten_with_path.
  py::tuple AsTuple() const;
  // RecursionError: a cycle if a container is its own ancestor, else depth.
  [[noreturn]] void RaiseTooDeep(PyObject* obj) const;

 private:
  struct Entry {
    PyObject* key;
    Py_ssize_t index;
  };
  std::vector<Entry> entries_;
  std::vector<PyObject*> containers_;  // the parent of each entry
};

// What a tree has at some place, in words: "a list of 3 items",
// "a dict with keys ['a', 'b']", "a leaf of type Tensor".
std::string DescribeObject(PyObject* obj, const WalkOptions& options);
// What a spec expects at nodes()[index], in the same words.
std::string DescribeNode(const TreeSpec& spec, int index);

}  // namespace metafuse::tree::python
