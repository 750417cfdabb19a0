#include "tree/python/arithmetic.h"

#include <torch/csrc/autograd/python_variable.h>

#include "tree/python/errors.h"
#include "tree/python/flatten.h"
#include "tree/python/flatten_as.h"
#include "tree/python/unflatten.h"
#include "tree/tensor_ops.h"

namespace metafuse::tree::python {

namespace {

// The leaves as tensors; TypeError naming the first leaf that is not one.
std::vector<at::Tensor> Tensors(const py::list& leaves, PyObject* tree,
                                const WalkOptions& options, const char* op,
                                const char* which) {
  std::vector<at::Tensor> out;
  const Py_ssize_t n = PyList_GET_SIZE(leaves.ptr());
  out.reserve(n);
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* leaf = PyList_GET_ITEM(leaves.ptr(), i);
    if (!THPVariable_Check(leaf)) {
      // The error path can afford a second walk for the leaf's path.
      FlatTree with_paths = FlattenWithPaths(tree, options);
      Raise(PyExc_TypeError,
            std::string(op) + ": the leaf at " + Repr(with_paths.paths[i].ptr()) +
                " of " + which + " is " + Repr(leaf) + " of type " +
                Py_TYPE(leaf)->tp_name + "; every leaf must be a torch.Tensor");
    }
    out.push_back(THPVariable_Unpack(leaf));
  }
  return out;
}

py::object Rebuild(const TreeSpec& spec, std::vector<at::Tensor> tensors) {
  py::list leaves = py::reinterpret_steal<py::list>(PyList_New(tensors.size()));
  for (size_t i = 0; i < tensors.size(); ++i) {
    PyList_SET_ITEM(leaves.ptr(), i, THPVariable_Wrap(std::move(tensors[i])));
  }
  return Unflatten(spec, leaves.ptr());
}

// A Python number as an at::Scalar (TypeError otherwise).
at::Scalar ToScalar(PyObject* obj, const char* op, const char* name) {
  if (PyBool_Check(obj)) return at::Scalar(obj == Py_True);
  if (PyLong_Check(obj)) {
    long long v = PyLong_AsLongLong(obj);
    if (v == -1 && PyErr_Occurred()) RethrowPythonError();
    return at::Scalar(static_cast<int64_t>(v));
  }
  if (PyFloat_Check(obj)) return at::Scalar(PyFloat_AS_DOUBLE(obj));
  Raise(PyExc_TypeError, std::string(op) + ": " + name +
                             " must be a number or a torch.Tensor, got " +
                             Py_TYPE(obj)->tp_name);
}

// Scales leaves by a number or a tensor.
std::vector<at::Tensor> Scale(PyObject* scalar, const std::vector<at::Tensor>& x,
                              const char* op, const char* name) {
  if (THPVariable_Check(scalar)) {
    const at::Tensor& s = THPVariable_Unpack(scalar);
    std::vector<at::Tensor> out;
    out.reserve(x.size());
    for (const at::Tensor& t : x) out.push_back(at::mul(t, s));
    return out;
  }
  return ScalarMulLeaves(ToScalar(scalar, op, name), x);
}

py::object Combine(PyObject* a, PyObject* b, PyObject* alpha,
                   const WalkOptions& options, const char* op, bool subtract) {
  FlatTree fa = Flatten(a, options);
  py::list lb = FlattenAs(*fa.spec, b, options.is_leaf,
                          std::string(op) + ": the second tree does not match the first");
  std::vector<at::Tensor> x = Tensors(fa.leaves, a, options, op, "the first tree");
  std::vector<at::Tensor> y = Tensors(lb, b, options, op, "the second tree");
  at::Scalar scale = 1;
  if (alpha != nullptr && alpha != Py_None) {
    if (THPVariable_Check(alpha)) {
      y = Scale(alpha, y, op, "alpha");
    } else {
      scale = ToScalar(alpha, op, "alpha");
    }
  }
  return Rebuild(*fa.spec, subtract ? SubLeaves(x, y, scale) : AddLeaves(x, y, scale));
}

}  // namespace

py::object TreeAdd(PyObject* a, PyObject* b, PyObject* alpha, const WalkOptions& options) {
  return Combine(a, b, alpha, options, "add", false);
}

py::object TreeSub(PyObject* a, PyObject* b, PyObject* alpha, const WalkOptions& options) {
  return Combine(a, b, alpha, options, "sub", true);
}

py::object TreeScalarMul(PyObject* scalar, PyObject* tree, const WalkOptions& options) {
  FlatTree flat = Flatten(tree, options);
  std::vector<at::Tensor> x = Tensors(flat.leaves, tree, options, "scalar_mul", "the tree");
  return Rebuild(*flat.spec, Scale(scalar, x, "scalar_mul", "scalar"));
}

py::object TreeVdot(PyObject* a, PyObject* b, const WalkOptions& options) {
  FlatTree fa = Flatten(a, options);
  py::list lb = FlattenAs(*fa.spec, b, options.is_leaf,
                          "vdot: the second tree does not match the first");
  std::vector<at::Tensor> x = Tensors(fa.leaves, a, options, "vdot", "the first tree");
  std::vector<at::Tensor> y = Tensors(lb, b, options, "vdot", "the second tree");
  return py::reinterpret_steal<py::object>(THPVariable_Wrap(VdotLeaves(x, y)));
}

}  // namespace metafuse::tree::python
