#include "frontend/bindings/diff_bindings.h"

#include <pybind11/functional.h>
#include <pybind11/stl.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>

#include "frontend/core/diff/linear_solve.h"
#include "frontend/core/diff/zero_order.h"

namespace py = pybind11;

namespace metafuse::diff {

namespace {

SolveOptions MakeOptions(double ridge, int64_t maxiter, double rtol,
                         double atol, const TensorList& init) {
  SolveOptions o;
  o.ridge = ridge;
  o.maxiter = maxiter;
  o.rtol = rtol;
  o.atol = atol;
  o.init = init;
  return o;
}

py::tuple ResultToPython(const SolveResult& r) {
  return py::make_tuple(r.x, r.iterations, r.residual, r.target, r.converged);
}

}  // namespace

void BindDiff(py::module_& parent) {
  py::module_ m = parent.def_submodule(
      "_diff", "Numeric cores of metafuse.diff (C++).");
  // Linear solvers: each returns (x, iterations, residual, target, converged).
  m.def(
      "cg",
      [](const MatVec& A, const TensorList& b, double ridge, int64_t maxiter,
         double rtol, double atol, const TensorList& init,
         std::optional<MatVec> M) {
        SolveOptions options = MakeOptions(ridge, maxiter, rtol, atol, init);
        if (M) options.preconditioner = *M;
        return ResultToPython(ConjugateGradient(A, b, options));
      },
      py::arg("matvec"), py::arg("b"), py::arg("ridge"), py::arg("maxiter"),
      py::arg("rtol"), py::arg("atol"), py::arg("init"),
      py::arg("M") = py::none());
  m.def(
      "normal_cg",
      [](const MatVec& A, const MatVec& At, const TensorList& b, double ridge,
         int64_t maxiter, double rtol, double atol, const TensorList& init) {
        return ResultToPython(NormalConjugateGradient(
            A, At, b, MakeOptions(ridge, maxiter, rtol, atol, init)));
      },
      py::arg("matvec"), py::arg("rmatvec"), py::arg("b"), py::arg("ridge"),
      py::arg("maxiter"), py::arg("rtol"), py::arg("atol"), py::arg("init"));
  m.def(
      "neumann",
      [](const MatVec& A, const TensorList& b, double alpha, double ridge,
         int64_t maxiter, double rtol, double atol) {
        return ResultToPython(NeumannSeries(
            A, b, alpha, MakeOptions(ridge, maxiter, rtol, atol, {})));
      },
      py::arg("matvec"), py::arg("b"), py::arg("alpha"), py::arg("ridge"),
      py::arg("maxiter"), py::arg("rtol"), py::arg("atol"));
  m.def(
      "dense",
      [](const MatVec& A, const TensorList& b, double ridge) {
        return ResultToPython(
            DenseSolve(A, b, MakeOptions(ridge, -1, 0.0, 0.0, {})));
      },
      py::arg("matvec"), py::arg("b"), py::arg("ridge"));
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
