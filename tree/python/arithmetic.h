// The optimizer helpers over matching trees of tensors: add, sub,
// scalar_mul, vdot. Python trees are flattened and checked here; the
// arithmetic itself is tree/tensor_ops.h, shared with the C++ side. A scalar
// may be a Python number or a tensor (a differentiable learning rate).
#pragma once

#include <Python.h>
#include <pybind11/pybind11.h>

#include "tree/python/options.h"

namespace metafuse::tree::python {

namespace py = pybind11;

py::object TreeAdd(PyObject* a, PyObject* b, PyObject* alpha, const WalkOptions& options);
py::object TreeSub(PyObject* a, PyObject* b, PyObject* alpha, const WalkOptions& options);
py::object TreeScalarMul(PyObject* scalar, PyObject* tree, const WalkOptions& options);
py::object TreeVdot(PyObject* a, PyObject* b, const WalkOptions& options);

}  // namespace metafuse::tree::python
