#include "frontend/compiler_bindings.h"

#include <pybind11/stl.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>

#include "compiler/autodiff.h"
#include "compiler/compiled_inner_loop.h"

namespace py = pybind11;

namespace metafuse::compiler {

void BindCompiler(py::module_& parent) {
  py::module_ m = parent.def_submodule("_compiler", "metafuse's compiler (C++).");
  static py::exception<UnsupportedOp> unsupported(m, "UnsupportedOp",
                                                  PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const UnsupportedOp& e) {
      unsupported(e.what());
    }
  });

  py::class_<CompiledInnerLoop, std::shared_ptr<CompiledInnerLoop>>(m, "CompiledInnerLoop")
      .def("__call__", &CompiledInnerLoop::operator(), py::arg("inputs"))
      .def("stages",
           [](const CompiledInnerLoop& loop) { return loop.stages().stages(); })
      .def_property_readonly("forward_instructions", [](const CompiledInnerLoop& l) {
        return l.forward_program().num_instructions();
      })
      .def_property_readonly("backward_instructions", [](const CompiledInnerLoop& l) {
        return l.backward_program().num_instructions();
      })
      .def("listing", [](const CompiledInnerLoop& l) {
        return py::make_tuple(l.forward_program().Listing(),
                              l.backward_program().Listing());
      });

  m.def(
      "compile",
      [](const std::shared_ptr<torch::jit::Graph>& graph, int64_t num_params,
         int64_t num_batch, int64_t num_extra, int64_t steps, bool return_losses,
         const std::string& kind, double lr, bool lr_is_input, bool lr_per_param,
         double weight_decay,
         bool maximize, double b1, double b2, double eps, double eps_root) {
        InnerLoopLayout layout;
        layout.num_params = num_params;
        layout.num_batch = num_batch;
        layout.num_extra = num_extra;
        layout.steps = steps;
        layout.return_losses = return_losses;
        OptimizerSpec o;
        o.kind = kind;
        o.lr = lr;
        o.lr_is_input = lr_is_input;
        o.lr_per_param = lr_per_param;
        o.weight_decay = weight_decay;
        o.maximize = maximize;
        o.b1 = b1;
        o.b2 = b2;
        o.eps = eps;
        o.eps_root = eps_root;
        py::gil_scoped_release no_gil;
        return CompiledInnerLoop::Compile(graph, layout, o);
      },
      py::arg("graph"), py::arg("num_params"), py::arg("num_batch"),
      py::arg("num_extra"), py::arg("steps"), py::arg("return_losses"),
      py::arg("kind"), py::arg("lr"), py::arg("lr_is_input"), py::arg("lr_per_param"),
      py::arg("weight_decay"), py::arg("maximize"), py::arg("b1"), py::arg("b2"),
      py::arg("eps"), py::arg("eps_root"));
}

}  // namespace metafuse::compiler
