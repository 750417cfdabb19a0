// The structure-keyed flatten cache. Programs flatten trees of the same shape
// over and over (parameters, gradients, optimizer states each step). For
// each root type (and none_is_leaf/namespace) the cache keeps the last spec
// seen; flatten first matches the tree against it (flatten_as.h: dict keys
// looked up, not sorted; no spec built) and only on a miss does the full
// flatten and remembers its spec. A hit returns the identical spec object,
// so comparing the specs of same-shaped trees is a pointer comparison.
#pragma once

#include <Python.h>
#include <pybind11/pybind11.h>

#include <string>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "tree/python/options.h"
#include "tree/tree_spec.h"

namespace metafuse::tree::python {

namespace py = pybind11;

class StructureCache {
 public:
  static StructureCache& Get();

  bool enabled() const { return enabled_; }
  void set_enabled(bool enabled) { enabled_ = enabled; }

  TreeSpecPtr Find(PyTypeObject* root_type, const WalkOptions& options) const;
  // Remembers `spec` for its root type; counts a miss.
  void Store(PyTypeObject* root_type, const WalkOptions& options, TreeSpecPtr spec);
  void CountHit() { ++hits_; }

  py::dict Info() const;  // {'hits', 'misses', 'size', 'enabled'}
  void Clear();

 private:
  using Key = std::tuple<PyTypeObject*, bool, std::string>;
  struct Entry {
    py::object type;  // keeps the key's type alive
    TreeSpecPtr spec;
  };
  static constexpr size_t kMaxEntries = 256;

  absl::flat_hash_map<Key, Entry> entries_;
  bool enabled_ = true;
  size_t hits_ = 0;
  size_t misses_ = 0;
};

}  // namespace metafuse::tree::python
