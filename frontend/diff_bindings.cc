#include "frontend/diff_bindings.h"

#include <pybind11/stl.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>

#include "frontend/diff/zero_order.h"

namespace py = pybind11;

namespace metafuse::diff {

void BindDiff(py::module_& parent) {
  py::module_ m = parent.def_submodule(
      "_diff", "Numeric cores of metafuse.diff (C++).");
  m.def(
      "combine_zero_order",
      [](const std::string& method, const at::Tensor& values,
         const c10::optional<at::Tensor>& other, const TensorList& noises,
         double sigma) {
        return CombineZeroOrderEstimate(ParseZeroOrderMethod(method), values,
                                        other.value_or(at::Tensor()), noises,
                                        sigma);
      },
      py::arg("method"), py::arg("values"), py::arg("other"),
      py::arg("noises"), py::arg("sigma"));
  m.def("check_method",
        [](const std::string& method) { ParseZeroOrderMethod(method); });
  m.def(
      "evaluate_scripted",
      [](const py::object& fn, const py::tuple& args,
         const std::vector<int64_t>& argnums, const TensorList& noises,
         double sigma, double sign) {
        auto strong = py::cast<torch::jit::StrongFunctionPtr>(fn);
        std::vector<c10::IValue> ivalues;
        for (const auto& a : args) {
          ivalues.push_back(torch::jit::toIValue(a, c10::AnyType::get()));
        }
        py::gil_scoped_release no_gil;  // the samples run without Python
        return EvaluateScriptedSamples(*strong.function_, ivalues, argnums,
                                       noises, sigma, sign);
      },
      py::arg("fn"), py::arg("args"), py::arg("argnums"), py::arg("noises"),
      py::arg("sigma"), py::arg("sign"));
}

}  // namespace metafuse::diff
