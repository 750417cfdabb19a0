#include "tree/python/bindings.h"

#include <pybind11/stl.h>

#include "tree/python/arithmetic.h"
#include "tree/python/errors.h"
#include "tree/python/flatten.h"
#include "tree/python/flatten_as.h"
#include "tree/python/map.h"
#include "tree/python/py_node_data.h"
#include "tree/python/registry.h"
#include "tree/python/structure_cache.h"
#include "tree/python/unflatten.h"
#include "tree/serialization.h"

namespace metafuse::tree {

namespace py = pybind11;
using python::WalkOptions;

namespace {

// pybind11 holders are non-const; specs stay immutable by construction.
using SpecHolder = std::shared_ptr<TreeSpec>;

py::object Wrap(TreeSpecPtr spec) {
  return py::cast(std::const_pointer_cast<TreeSpec>(std::move(spec)));
}

WalkOptions Options(const py::object& is_leaf, bool none_is_leaf,
                    std::string name_space) {
  WalkOptions options;
  if (!is_leaf.is_none()) {
    if (!PyCallable_Check(is_leaf.ptr())) {
      python::Raise(PyExc_TypeError, "is_leaf must be a callable or None, got " +
                                         python::Repr(is_leaf.ptr()));
    }
    options.is_leaf = is_leaf.ptr();
  }
  options.none_is_leaf = none_is_leaf;
  options.name_space = std::move(name_space);
  return options;
}

template <typename T>
T OrRaise(absl::StatusOr<T> value) {
  if (!value.ok()) python::Raise(PyExc_ValueError, std::string(value.status().message()));
  return *std::move(value);
}

#define MF_WALK_ARGS                                                   \
  py::arg("is_leaf") = py::none(), py::arg("none_is_leaf") = false, \
  py::arg("namespace") = ""

void BindTreeSpec(py::module_& m) {
  py::class_<TreeSpec, SpecHolder>(m, "TreeSpec",
                                   "The structure of a pytree (immutable, hashable).")
      .def_property_readonly("num_leaves", &TreeSpec::num_leaves)
      .def_property_readonly("num_nodes", &TreeSpec::num_nodes)
      .def_property_readonly("num_children", &TreeSpec::num_children)
      .def_property_readonly("none_is_leaf", &TreeSpec::none_is_leaf)
      .def_property_readonly("namespace", &TreeSpec::name_space)
      .def_property_readonly(
          "kind", [](const TreeSpec& s) { return std::string(KindName(s.root().kind)); })
      .def("is_leaf", &TreeSpec::is_leaf)
      .def("children",
           [](const TreeSpec& s) {
             py::list out;
             for (TreeSpecPtr child : s.Children()) out.append(Wrap(std::move(child)));
             return out;
           })
      .def("unflatten",
           [](const TreeSpec& s, py::object leaves) {
             return python::Unflatten(s, leaves.ptr());
           })
      .def("serialize",
           [](const TreeSpec& s) { return OrRaise(SerializeTreeSpec(s)); })
      .def_static("deserialize",
                  [](const std::string& text) {
                    return Wrap(OrRaise(DeserializeTreeSpec(text, python::PyNodeDataFactory)));
                  })
      .def("__eq__",
           [](const TreeSpec& s, py::object other) -> py::object {
             if (!py::isinstance<TreeSpec>(other)) return py::reinterpret_borrow<py::object>(Py_NotImplemented);
             return py::bool_(s == other.cast<const TreeSpec&>());
           })
      .def("__ne__",
           [](const TreeSpec& s, py::object other) -> py::object {
             if (!py::isinstance<TreeSpec>(other)) return py::reinterpret_borrow<py::object>(Py_NotImplemented);
             return py::bool_(s != other.cast<const TreeSpec&>());
           })
      .def("__hash__", [](const TreeSpec& s) { return static_cast<Py_ssize_t>(s.Hash()); })
      .def("__repr__", &TreeSpec::ToString)
      .def(py::pickle(
          [](const TreeSpec& s) { return OrRaise(SerializeTreeSpec(s)); },
          [](const std::string& text) {
            return std::const_pointer_cast<TreeSpec>(
                OrRaise(DeserializeTreeSpec(text, python::PyNodeDataFactory)));
          }));
}

void BindOperations(py::module_& m) {
  m.def(
      "flatten",
      [](py::object tree, py::object is_leaf, bool none_is_leaf, std::string ns) {
        python::FlatTree flat =
            python::Flatten(tree.ptr(), Options(is_leaf, none_is_leaf, std::move(ns)));
        return py::make_tuple(std::move(flat.leaves), Wrap(std::move(flat.spec)));
      },
      py::arg("tree"), MF_WALK_ARGS);
  m.def(
      "flatten_with_path",
      [](py::object tree, py::object is_leaf, bool none_is_leaf, std::string ns) {
        python::FlatTree flat = python::FlattenWithPaths(
            tree.ptr(), Options(is_leaf, none_is_leaf, std::move(ns)));
        return py::make_tuple(std::move(flat.paths), std::move(flat.leaves),
                              Wrap(std::move(flat.spec)));
      },
      py::arg("tree"), MF_WALK_ARGS);
  m.def(
      "flatten_as",
      [](const TreeSpec& spec, py::object tree, py::object is_leaf) {
        return python::FlattenAs(spec, tree.ptr(),
                                 Options(is_leaf, false, "").is_leaf,
                                 "flatten_as: the tree does not match the spec");
      },
      py::arg("spec"), py::arg("tree"), py::arg("is_leaf") = py::none());
  m.def(
      "unflatten",
      [](const TreeSpec& spec, py::object leaves) {
        return python::Unflatten(spec, leaves.ptr());
      },
      py::arg("spec"), py::arg("leaves"));
  m.def(
      "leaves",
      [](py::object tree, py::object is_leaf, bool none_is_leaf, std::string ns) {
        return python::Flatten(tree.ptr(), Options(is_leaf, none_is_leaf, std::move(ns)))
            .leaves;
      },
      py::arg("tree"), MF_WALK_ARGS);
  m.def(
      "structure",
      [](py::object tree, py::object is_leaf, bool none_is_leaf, std::string ns) {
        return Wrap(
            python::Flatten(tree.ptr(), Options(is_leaf, none_is_leaf, std::move(ns))).spec);
      },
      py::arg("tree"), MF_WALK_ARGS);
  for (bool inplace : {false, true}) {
    m.def(
        inplace ? "map_" : "map",
        [inplace](py::object func, py::object tree, py::tuple rest, py::object is_leaf,
                  bool none_is_leaf, std::string ns) {
          if (!PyCallable_Check(func.ptr())) {
            python::Raise(PyExc_TypeError, "map: func must be callable, got " +
                                               python::Repr(func.ptr()));
          }
          return python::Map(func.ptr(), tree.ptr(), rest,
                             Options(is_leaf, none_is_leaf, std::move(ns)), inplace);
        },
        py::arg("func"), py::arg("tree"), py::arg("rest") = py::tuple(), MF_WALK_ARGS);
  }
  m.def(
      "all_leaves",
      [](py::iterable items, py::object is_leaf, bool none_is_leaf, std::string ns) {
        WalkOptions options = Options(is_leaf, none_is_leaf, std::move(ns));
        for (py::handle item : items) {
          const python::PyNodeDef* def = nullptr;
          if (python::ClassifyNode(item.ptr(), options, &def) != NodeKind::kLeaf) {
            return false;
          }
        }
        return true;
      },
      py::arg("iterable"), MF_WALK_ARGS);
}

void BindRegistryAndCache(py::module_& m) {
  m.def(
      "register_node",
      [](py::object cls, py::object flatten_fn, py::object unflatten_fn, std::string ns) {
        python::PyRegistry::Get().Register(cls, std::move(flatten_fn),
                                           std::move(unflatten_fn), ns);
        python::StructureCache::Get().Clear();  // classifications may change
      },
      py::arg("cls"), py::arg("flatten_fn"), py::arg("unflatten_fn"),
      py::arg("namespace") = "");
  m.def(
      "unregister_node",
      [](py::object cls, std::string ns) {
        python::PyRegistry::Get().Unregister(cls, ns);
        python::StructureCache::Get().Clear();
      },
      py::arg("cls"), py::arg("namespace") = "");
  m.def("cache_info", [] { return python::StructureCache::Get().Info(); });
  m.def("clear_cache", [] { python::StructureCache::Get().Clear(); });
  m.def(
      "set_cache_enabled",
      [](bool enabled) { python::StructureCache::Get().set_enabled(enabled); },
      py::arg("enabled"));
  m.attr("MAX_DEPTH") = kMaxDepth;
}

void BindArithmetic(py::module_& m) {
  using Combine = py::object (*)(PyObject*, PyObject*, PyObject*, const WalkOptions&);
  for (auto [name, combine] : {std::pair<const char*, Combine>{"add", &python::TreeAdd},
                               std::pair<const char*, Combine>{"sub", &python::TreeSub}}) {
    m.def(
        name,
        [combine = combine](py::object a, py::object b, py::object alpha,
                            py::object is_leaf, bool none_is_leaf, std::string ns) {
          return combine(a.ptr(), b.ptr(), alpha.ptr(),
                         Options(is_leaf, none_is_leaf, std::move(ns)));
        },
        py::arg("a"), py::arg("b"), py::arg("alpha") = py::none(), MF_WALK_ARGS);
  }
  m.def(
      "scalar_mul",
      [](py::object scalar, py::object tree, py::object is_leaf, bool none_is_leaf,
         std::string ns) {
        return python::TreeScalarMul(scalar.ptr(), tree.ptr(),
                                     Options(is_leaf, none_is_leaf, std::move(ns)));
      },
      py::arg("scalar"), py::arg("tree"), MF_WALK_ARGS);
  m.def(
      "vdot",
      [](py::object a, py::object b, py::object is_leaf, bool none_is_leaf,
         std::string ns) {
        return python::TreeVdot(a.ptr(), b.ptr(),
                                Options(is_leaf, none_is_leaf, std::move(ns)));
      },
      py::arg("a"), py::arg("b"), MF_WALK_ARGS);
}

#undef MF_WALK_ARGS

}  // namespace

void BindTree(py::module_& parent) {
  py::module_ m = parent.def_submodule("_tree", "metafuse pytrees (C++ core)");
  BindTreeSpec(m);
  BindOperations(m);
  BindRegistryAndCache(m);
  BindArithmetic(m);
}

}  // namespace metafuse::tree
