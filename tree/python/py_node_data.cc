#include "tree/python/py_node_data.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tree/python/errors.h"
#include "tree/python/registry.h"

namespace metafuse::tree::python {

namespace {

bool SameObject(const py::object& a, const py::object& b) {
  if (a.ptr() == b.ptr()) return true;
  return a && b && PyEqual(a.ptr(), b.ptr());
}

size_t HashOrZero(const py::object& obj) {
  if (!obj) return 0;
  Py_hash_t h = PyObject_Hash(obj.ptr());
  if (h == -1) {
    PyErr_Clear();  // unhashable contexts only make hashing coarser
    return 0;
  }
  return static_cast<size_t>(h);
}

std::string FormatKeyed(const py::object& keys,
                        const std::vector<std::string>& children) {
  std::vector<std::string> items;
  for (size_t i = 0; i < children.size(); ++i) {
    items.push_back(Repr(PyTuple_GET_ITEM(keys.ptr(), i)) + ": " + children[i]);
  }
  return "{" + absl::StrJoin(items, ", ") + "}";
}

absl::StatusOr<Literal> ToLiteral(PyObject* obj, int depth = 0) {
  if (obj == Py_None) return Literal::None();
  if (PyBool_Check(obj)) return Literal::Bool(obj == Py_True);
  if (PyLong_CheckExact(obj)) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (!overflow && !(v == -1 && PyErr_Occurred())) return Literal::Int(v);
    PyErr_Clear();
  } else if (PyFloat_CheckExact(obj)) {
    return Literal::Float(PyFloat_AS_DOUBLE(obj));
  } else if (PyUnicode_CheckExact(obj)) {
    Py_ssize_t size = 0;
    const char* text = PyUnicode_AsUTF8AndSize(obj, &size);
    if (text) return Literal::String(std::string(text, size));
    PyErr_Clear();
  } else if (PyTuple_CheckExact(obj) && depth < 32) {
    std::vector<Literal> items;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(obj); ++i) {
      auto item = ToLiteral(PyTuple_GET_ITEM(obj, i), depth + 1);
      if (!item.ok()) return item.status();
      items.push_back(*std::move(item));
    }
    return Literal::Tuple(std::move(items));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "cannot serialize ", Repr(obj), " (of type ", Py_TYPE(obj)->tp_name,
      "): dict keys and contexts must be None, bool, int, float, str or "
      "tuples of them"));
}

py::object FromLiteral(const Literal& v) {
  switch (v.type) {
    case Literal::Type::kNone: return py::none();
    case Literal::Type::kBool: return py::bool_(v.b);
    case Literal::Type::kInt: return py::int_(v.i);
    case Literal::Type::kFloat: return py::float_(v.f);
    case Literal::Type::kString: return py::str(v.s);
    case Literal::Type::kTuple: {
      py::tuple t(v.items.size());
      for (size_t i = 0; i < v.items.size(); ++i) t[i] = FromLiteral(v.items[i]);
      return std::move(t);
    }
  }
  return py::none();
}

// Imports "pkg.mod.Outer.Inner": the longest importable module prefix, then
// attributes.
absl::StatusOr<py::object> Resolve(const std::string& name) {
  std::vector<std::string> parts;
  for (size_t start = 0;;) {
    size_t dot = name.find('.', start);
    parts.push_back(name.substr(start, dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  for (size_t split = parts.size() - 1; split >= 1; --split) {
    std::string module = absl::StrJoin(parts.begin(), parts.begin() + split, ".");
    PyObject* mod = PyImport_ImportModule(module.c_str());
    if (mod == nullptr) {
      PyErr_Clear();
      continue;
    }
    py::object obj = py::reinterpret_steal<py::object>(mod);
    bool found = true;
    for (size_t i = split; i < parts.size() && found; ++i) {
      PyObject* attr = PyObject_GetAttrString(obj.ptr(), parts[i].c_str());
      if (attr == nullptr) {
        PyErr_Clear();
        found = false;
      } else {
        obj = py::reinterpret_steal<py::object>(attr);
      }
    }
    if (found) return obj;
  }
  return absl::NotFoundError(absl::StrCat("cannot import '", name, "'"));
}

}  // namespace

bool PyEqual(PyObject* a, PyObject* b) {
  int same = PyObject_RichCompareBool(a, b, Py_EQ);
  if (same < 0) PyErr_Clear();
  return same == 1;
}

std::string QualifiedName(PyObject* obj) {
  py::handle h(obj);
  std::string module = py::hasattr(h, "__module__") && !h.attr("__module__").is_none()
                           ? py::str(h.attr("__module__")).cast<std::string>()
                           : "builtins";
  std::string qualname = py::hasattr(h, "__qualname__")
                             ? py::str(h.attr("__qualname__")).cast<std::string>()
                             : Repr(obj);
  return module + "." + qualname;
}

bool PyNodeData::Equals(const NodeData& other) const {
  auto* o = dynamic_cast<const PyNodeData*>(&other);
  return o && type.ptr() == o->type.ptr() && SameObject(keys, o->keys) &&
         SameObject(context, o->context);
}

size_t PyNodeData::Hash() const {
  return std::hash<void*>()(type.ptr()) ^ (HashOrZero(keys) * 31) ^
         (HashOrZero(context) * 1000003);
}

std::string PyNodeData::Format(NodeKind kind,
                               const std::vector<std::string>& children) const {
  switch (kind) {
    case NodeKind::kDict: return FormatKeyed(keys, children);
    case NodeKind::kOrderedDict:
      return "OrderedDict(" + FormatKeyed(keys, children) + ")";
    case NodeKind::kDefaultDict:
      return "defaultdict(" + Repr(context.ptr()) + ", " +
             FormatKeyed(keys, children) + ")";
    case NodeKind::kNamedTuple: {
      py::tuple fields = type.attr("_fields");
      std::vector<std::string> items;
      for (size_t i = 0; i < children.size(); ++i) {
        items.push_back(py::str(fields[i]).cast<std::string>() + "=" + children[i]);
      }
      return py::str(type.attr("__name__")).cast<std::string>() + "(" +
             absl::StrJoin(items, ", ") + ")";
    }
    default:
      return "CustomTreeNode(" + py::str(type.attr("__name__")).cast<std::string>() +
             "[" + Repr(context.ptr()) + "], [" + absl::StrJoin(children, ", ") + "])";
  }
}

absl::Status PyNodeData::Serialize(NodeRecord* record) const {
  if (keys) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(keys.ptr()); ++i) {
      auto key = ToLiteral(PyTuple_GET_ITEM(keys.ptr(), i));
      if (!key.ok()) return key.status();
      record->values.push_back(*std::move(key));
    }
  }
  PyObject* named = record->kind == NodeKind::kDefaultDict ? context.ptr() : type.ptr();
  if (named != nullptr && named != Py_None) {
    record->type_name = QualifiedName(named);
    // A reader finds it again by name: check now that this works.
    auto found = Resolve(record->type_name);
    if (!found.ok() || found->ptr() != named) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot serialize a reference to ", Repr(named), " (", record->type_name,
          "): it cannot be found again by that name; only module-level classes "
          "and functions can be serialized"));
    }
  }
  if (record->kind == NodeKind::kCustom) {
    for (const py::object& value : {context, entries}) {
      auto literal = ToLiteral(value.ptr());
      if (!literal.ok()) return literal.status();
      record->values.push_back(*std::move(literal));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const NodeData>> PyNodeDataFactory(
    const NodeRecord& record, const std::string& name_space) {
  auto data = std::make_shared<PyNodeData>();
  py::object named = py::none();
  if (!record.type_name.empty()) {
    auto resolved = Resolve(record.type_name);
    if (!resolved.ok()) return resolved.status();
    named = *std::move(resolved);
  }
  switch (record.kind) {
    case NodeKind::kDict:
    case NodeKind::kOrderedDict:
    case NodeKind::kDefaultDict: {
      py::tuple keys(record.values.size());
      for (size_t i = 0; i < record.values.size(); ++i) keys[i] = FromLiteral(record.values[i]);
      data->keys = std::move(keys);
      if (record.kind == NodeKind::kDefaultDict) data->context = named;
      break;
    }
    case NodeKind::kNamedTuple:
      if (!PyType_Check(named.ptr()) ||
          !PyRegistry::Get().IsNamedTuple(reinterpret_cast<PyTypeObject*>(named.ptr()))) {
        return absl::InvalidArgumentError(record.type_name + " is not a namedtuple class");
      }
      data->type = named;
      break;
    case NodeKind::kCustom: {
      const PyNodeDef* def =
          PyType_Check(named.ptr())
              ? PyRegistry::Get().Find(reinterpret_cast<PyTypeObject*>(named.ptr()),
                                       name_space)
              : nullptr;
      if (def == nullptr || record.values.size() != 2) {
        return absl::FailedPreconditionError(absl::StrCat(
            record.type_name, " is not a registered node type in namespace '",
            name_space, "'; register it before deserializing"));
      }
      data->type = named;
      data->unflatten_fn = def->unflatten_fn;
      data->context = FromLiteral(record.values[0]);
      data->entries = FromLiteral(record.values[1]);
      break;
    }
    default: break;
  }
  return std::shared_ptr<const NodeData>(std::move(data));
}

}  // namespace metafuse::tree::python
