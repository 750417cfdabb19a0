#include "tree/python/errors.h"

#include "absl/container/flat_hash_map.h"

#include "tree/python/py_node_data.h"
#include "tree/python/registry.h"

namespace metafuse::tree::python {

void Raise(PyObject* exception_type, const std::string& message) {
  PyErr_SetString(exception_type, message.c_str());
  throw py::error_already_set();
}

void RethrowPythonError() { throw py::error_already_set(); }

std::string Repr(PyObject* obj) {
  PyObject* repr = PyObject_Repr(obj);
  if (repr == nullptr) {
    PyErr_Clear();
    return "<unprintable>";
  }
  const char* text = PyUnicode_AsUTF8(repr);
  std::string out = text ? text : "<unprintable>";
  if (!text) PyErr_Clear();
  Py_DECREF(repr);
  return out;
}

std::string PathTracker::Format(const char* root) const {
  std::string out = root;
  for (const Entry& e : entries_) {
    out += "[" + (e.key ? Repr(e.key) : std::to_string(e.index)) + "]";
  }
  return out;
}

py::tuple PathTracker::AsTuple() const {
  py::tuple path(entries_.size());
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    PyObject* item = e.key ? (Py_INCREF(e.key), e.key) : PyLong_FromSsize_t(e.index);
    if (item == nullptr) RethrowPythonError();
    PyTuple_SET_ITEM(path.ptr(), i, item);
  }
  return path;
}

void PathTracker::RaiseTooDeep(PyObject* obj) const {
  // The objects along the path are containers_[0..depth) and then obj; a
  // cycle is the first one that equals an earlier one.
  std::vector<PyObject*> chain(containers_);
  chain.push_back(obj);
  absl::flat_hash_map<PyObject*, size_t> first_seen;
  for (size_t j = 0; j < chain.size(); ++j) {
    auto [it, inserted] = first_seen.emplace(chain[j], j);
    if (inserted) continue;
    PathTracker ancestor, repeat;
    ancestor.entries_.assign(entries_.begin(), entries_.begin() + it->second);
    repeat.entries_.assign(entries_.begin(), entries_.begin() + j);
    Raise(PyExc_RecursionError,
          "the tree contains a cycle: the object at " + repeat.Format() +
              " is the same " + Py_TYPE(chain[j])->tp_name +
              " as its ancestor at " + ancestor.Format() + "; trees must be acyclic");
  }
  Raise(PyExc_RecursionError,
        "the tree is deeper than the limit of " + std::to_string(kMaxDepth) +
            " levels (at " + Format().substr(0, 120) + "...)");
}

namespace {

std::string KeysText(PyObject* keys) {
  // Lists the keys (at most 8) of a tuple or list of keys.
  PyObject* seq = PySequence_Fast(keys, "keys");
  if (seq == nullptr) {
    PyErr_Clear();
    return "[?]";
  }
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  std::string out = "[";
  for (Py_ssize_t i = 0; i < n && i < 8; ++i) {
    if (i) out += ", ";
    out += Repr(PySequence_Fast_ITEMS(seq)[i]);
  }
  if (n > 8) out += ", ... (" + std::to_string(n) + " keys)";
  Py_DECREF(seq);
  return out + "]";
}

std::string Items(Py_ssize_t n) {
  return std::to_string(n) + (n == 1 ? " item" : " items");
}

}  // namespace

std::string DescribeObject(PyObject* obj, const WalkOptions& options) {
  const PyNodeDef* def = nullptr;
  NodeKind kind = ClassifyType(obj, options, &def);
  switch (kind) {
    case NodeKind::kLeaf:
      return std::string("a leaf of type ") + Py_TYPE(obj)->tp_name;
    case NodeKind::kNone: return "None";
    case NodeKind::kTuple: return "a tuple of " + Items(PyTuple_GET_SIZE(obj));
    case NodeKind::kList: return "a list of " + Items(PyList_GET_SIZE(obj));
    case NodeKind::kNamedTuple:
      return std::string("a namedtuple ") + Py_TYPE(obj)->tp_name + " of " +
             Items(PyTuple_GET_SIZE(obj));
    case NodeKind::kCustom:
      return std::string("a registered ") + Py_TYPE(obj)->tp_name + " node";
    default: {
      PyObject* keys = PySequence_List(obj);
      if (keys == nullptr) {
        PyErr_Clear();
        return std::string("a ") + KindName(kind);
      }
      if (kind == NodeKind::kDict && PyList_Sort(keys) < 0) PyErr_Clear();
      std::string out = std::string("a ") + KindName(kind) + " with keys " + KeysText(keys);
      Py_DECREF(keys);
      return out;
    }
  }
}

std::string DescribeNode(const TreeSpec& spec, int index) {
  const Node& node = spec.nodes()[index];
  switch (node.kind) {
    case NodeKind::kLeaf: return "a leaf";
    case NodeKind::kNone: return "None";
    case NodeKind::kTuple: return "a tuple of " + Items(node.arity);
    case NodeKind::kList: return "a list of " + Items(node.arity);
    case NodeKind::kNamedTuple:
      return "a namedtuple " +
             std::string(reinterpret_cast<PyTypeObject*>(PyDataOf(node).type.ptr())->tp_name) +
             " of " + Items(node.arity);
    case NodeKind::kCustom:
      return "a registered " +
             std::string(reinterpret_cast<PyTypeObject*>(PyDataOf(node).type.ptr())->tp_name) +
             " node with " + Items(node.arity) + " and context " +
             Repr(PyDataOf(node).context.ptr());
    default:
      return std::string("a ") + KindName(node.kind) + " with keys " +
             KeysText(PyDataOf(node).keys.ptr());
  }
}

}  // namespace metafuse::tree::python
