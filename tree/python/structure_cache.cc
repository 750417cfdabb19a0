#include "tree/python/structure_cache.h"

namespace metafuse::tree::python {

StructureCache& StructureCache::Get() {
  static StructureCache* cache = new StructureCache;  // holds Python objects
  return *cache;
}

TreeSpecPtr StructureCache::Find(PyTypeObject* root_type,
                                 const WalkOptions& options) const {
  auto it = entries_.find(Key(root_type, options.none_is_leaf, options.name_space));
  return it == entries_.end() ? nullptr : it->second.spec;
}

void StructureCache::Store(PyTypeObject* root_type, const WalkOptions& options,
                           TreeSpecPtr spec) {
  ++misses_;
  if (entries_.size() >= kMaxEntries) entries_.clear();
  Entry& entry = entries_[Key(root_type, options.none_is_leaf, options.name_space)];
  entry.type = py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(root_type));
  entry.spec = std::move(spec);
}

py::dict StructureCache::Info() const {
  py::dict info;
  info["hits"] = hits_;
  info["misses"] = misses_;
  info["size"] = entries_.size();
  info["enabled"] = enabled_;
  return info;
}

void StructureCache::Clear() {
  entries_.clear();
  hits_ = misses_ = 0;
}

}  // namespace metafuse::tree::python
