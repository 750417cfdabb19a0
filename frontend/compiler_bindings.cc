#include "frontend/compiler_bindings.h"

#include <pybind11/stl.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>

#include "compiler/autodiff.h"
#include "compiler/compiled_inner_loop.h"
#include "runtime/profiler.h"

namespace py = pybind11;

namespace metafuse::compiler {
namespace {

// A profiling session started and stopped explicitly from Python (on the
// same thread: the session is thread-local).
struct ProfileHandle {
  std::unique_ptr<runtime::ProfileSession> session;
  std::string summary, trace;
  size_t num_events = 0;
  void Start() {
    TORCH_CHECK(!session, "profile already started");
    session = std::make_unique<runtime::ProfileSession>();
  }
  void Stop() {
    TORCH_CHECK(session, "profile not started");
    summary = session->Summary();
    trace = session->ChromeTrace();
    num_events = session->events().size();
    session.reset();
  }
};

// A compiled user function together with the IR of its stages.
struct CompiledUserFunction {
  std::shared_ptr<CompiledFunction> function;
  StageLog stages;
};

}  // namespace

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

  py::class_<ProfileHandle>(m, "Profile")
      .def(py::init<>())
      .def("start", &ProfileHandle::Start)
      .def("stop", &ProfileHandle::Stop)
      .def_readonly("summary", &ProfileHandle::summary)
      .def_readonly("chrome_trace", &ProfileHandle::trace)
      .def_readonly("num_events", &ProfileHandle::num_events);

  py::class_<CompiledUserFunction, std::shared_ptr<CompiledUserFunction>>(
      m, "CompiledFunction")
      .def("__call__",
           [](const CompiledUserFunction& f, const std::vector<at::Tensor>& inputs) {
             return (*f.function)(inputs);
           })
      .def("stages", [](const CompiledUserFunction& f) { return f.stages.stages(); })
      .def_property_readonly("forward_instructions", [](const CompiledUserFunction& f) {
        return f.function->forward_program().num_instructions();
      })
      .def_property_readonly("backward_instructions", [](const CompiledUserFunction& f) {
        return f.function->backward_program().num_instructions();
      });

  m.def(
      "compile_function",
      [](const std::shared_ptr<torch::jit::Graph>& traced,
         const std::vector<int64_t>& differentiable_inputs) {
        py::gil_scoped_release no_gil;
        auto out = std::make_shared<CompiledUserFunction>();
        std::shared_ptr<torch::jit::Graph> graph = traced->copy();
        PrepareCapturedGraph(graph, &out->stages);
        out->function = CompiledFunction::Build(graph, differentiable_inputs,
                                                &out->stages);
        return out;
      },
      py::arg("graph"), py::arg("differentiable_inputs"));

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
