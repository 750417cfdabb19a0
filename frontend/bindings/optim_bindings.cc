// metafuse._C._optim: the C++ optimizer core, bound for the Python front.
// Python passes flat lists of leaves; frontend/python/metafuse/optim/ turns
// them back into pytrees and states into namedtuples.
#include "frontend/bindings/optim_bindings.h"

#include <pybind11/functional.h>
#include <pybind11/stl.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include "metafuse/optim/alias.h"
#include "metafuse/optim/schedules.h"
#include "metafuse/optim/transforms.h"

namespace py = pybind11;

namespace metafuse::optim {
namespace {

// TransformState <-> (name, [(field, [tensors], per_param)], [children]).
py::tuple StateToPython(const TransformState& s) {
  py::list fields, children;
  for (const auto& f : s.fields) {
    fields.append(py::make_tuple(f.name, f.tensors, f.per_param));
  }
  for (const auto& c : s.children) children.append(StateToPython(c));
  return py::make_tuple(s.name, fields, children);
}

TransformState StateFromPython(const py::handle& obj) {
  py::tuple t = py::reinterpret_borrow<py::tuple>(obj);
  TORCH_CHECK(t.size() == 3, "malformed optimizer state record");
  TransformState s;
  s.name = t[0].cast<std::string>();
  for (auto item : t[1]) {
    py::tuple f = py::reinterpret_borrow<py::tuple>(item);
    s.fields.push_back({f[0].cast<std::string>(), f[1].cast<TensorList>(),
                        f[2].cast<bool>()});
  }
  for (auto child : t[2]) s.children.push_back(StateFromPython(child));
  return s;
}

LearningRate ToLearningRate(const py::object& lr) {
  if (THPVariable_Check(lr.ptr())) return LearningRate(lr.cast<at::Tensor>());
  if (PyCallable_Check(lr.ptr())) {
    return LearningRate(lr.cast<std::function<double(int64_t)>>());
  }
  try {
    return LearningRate(lr.cast<double>());
  } catch (const py::cast_error&) {
    throw py::type_error("`lr` must be a number, a tensor or a schedule "
                         "(a callable of the step count), got " +
                         std::string(py::str(lr.get_type())));
  }
}

Hyper ToHyper(const py::object& v, const char* name) {
  if (THPVariable_Check(v.ptr())) return Hyper(v.cast<at::Tensor>());
  try {
    return Hyper(v.cast<double>());
  } catch (const py::cast_error&) {
    throw py::type_error(std::string("`") + name +
                         "` must be a number or a tensor, got " +
                         std::string(py::str(v.get_type())));
  }
}

// The options every alias has.
template <typename Options>
Options WithCommon(const py::object& lr, double weight_decay, bool maximize,
                   bool fused) {
  Options o;
  o.lr = ToLearningRate(lr);
  o.weight_decay = weight_decay;
  o.maximize = maximize;
  o.fused = fused;
  return o;
}

// ... and those of the Adam family (two betas, eps, moment_requires_grad).
template <typename Options>
Options WithMoments(const py::object& lr, double b1, double b2, double eps,
                    double weight_decay, bool maximize, bool mrg, bool fused) {
  auto o = WithCommon<Options>(lr, weight_decay, maximize, fused);
  o.b1 = b1;
  o.b2 = b2;
  o.eps = eps;
  o.moment_requires_grad = mrg;
  return o;
}

}  // namespace

void BindOptim(py::module_& parent) {
  py::module_ m = parent.def_submodule(
      "_optim", "metafuse's functional optimizer core (C++).");

  py::class_<GradientTransformation, TransformPtr>(m, "GradientTransformation")
      .def("init",
           [](const GradientTransformation& tx, const TensorList& params) {
             return StateToPython(tx.Init(params));
           })
      .def(
          "update",
          [](const GradientTransformation& tx, const TensorList& updates,
             const py::object& state, std::optional<TensorList> params,
             bool inplace) {
            TransformState s = StateFromPython(state);
            TensorList out = tx.Update(updates, s, params ? &*params : nullptr,
                                       inplace);
            return py::make_tuple(out, StateToPython(s));
          },
          py::arg("updates"), py::arg("state"), py::arg("params"),
          py::arg("inplace"))
      .def("__repr__", &GradientTransformation::Describe);

  m.def("apply_updates", &ApplyUpdates, py::arg("params"), py::arg("updates"),
        py::arg("inplace"));

  // Transforms.
  m.def("scale", [](const py::object& s) { return Scale(ToHyper(s, "step_size")); });
  m.def("scale_by_schedule", [](std::function<double(int64_t)> fn) {
    return ScaleBySchedule(std::move(fn), "schedule");
  });
  m.def("scale_per_leaf", &ScalePerLeaf, py::arg("factors"));
  m.def("flip_sign", &FlipSign);
  m.def("scale_by_adam", &ScaleByAdam, py::arg("b1"), py::arg("b2"),
        py::arg("eps"), py::arg("eps_root"), py::arg("moment_requires_grad"),
        py::arg("amsgrad"));
  m.def("scale_by_adamax", &ScaleByAdamax, py::arg("b1"), py::arg("b2"),
        py::arg("eps"), py::arg("moment_requires_grad"));
  m.def("scale_by_radam", &ScaleByRAdam, py::arg("b1"), py::arg("b2"),
        py::arg("eps"), py::arg("threshold"), py::arg("moment_requires_grad"));
  m.def("scale_by_adadelta", &ScaleByAdadelta, py::arg("rho"), py::arg("eps"),
        py::arg("moment_requires_grad"));
  m.def("scale_by_rms", &ScaleByRms, py::arg("alpha"), py::arg("eps"),
        py::arg("initial_scale"));
  m.def("scale_by_stddev", &ScaleByStddev, py::arg("alpha"), py::arg("eps"),
        py::arg("initial_scale"));
  m.def("scale_by_rss", &ScaleByRss, py::arg("initial_accumulator_value"),
        py::arg("eps"));
  m.def("trace", &Trace, py::arg("momentum"), py::arg("dampening"),
        py::arg("nesterov"), py::arg("moment_requires_grad"));
  m.def("add_decayed_weights", &AddDecayedWeights, py::arg("weight_decay"),
        py::arg("mask"));
  m.def("masked", &Masked, py::arg("inner"), py::arg("mask"));
  m.def(
      "nan_to_num",
      [](double nan, std::optional<double> posinf,
         std::optional<double> neginf) {
        auto to_c10 = [](std::optional<double> v) {
          return v ? c10::optional<double>(*v) : c10::nullopt;
        };
        return NanToNum(nan, to_c10(posinf), to_c10(neginf));
      },
      py::arg("nan"), py::arg("posinf"), py::arg("neginf"));
  m.def("clip_grad_norm", &ClipGradNorm, py::arg("max_norm"),
        py::arg("norm_type"), py::arg("error_if_nonfinite") = false);
  m.def("register_hook", [](std::function<at::Tensor(const at::Tensor&)> hook,
                            std::string description) {
    return RegisterHook(std::move(hook), std::move(description));
  });
  m.def("chain", &Chain, py::arg("transforms"));
  m.def("identity", &Identity);

  // Schedules: returned as C++ callables of the count.
  m.def("linear_schedule", &LinearSchedule, py::arg("init_value"),
        py::arg("end_value"), py::arg("transition_steps"),
        py::arg("transition_begin"));
  m.def("polynomial_schedule", &PolynomialSchedule, py::arg("init_value"),
        py::arg("end_value"), py::arg("power"), py::arg("transition_steps"),
        py::arg("transition_begin"));
  m.def("exponential_decay", &ExponentialDecay, py::arg("init_value"),
        py::arg("decay_rate"), py::arg("transition_steps"),
        py::arg("transition_begin"), py::arg("staircase"),
        py::arg("end_value"), py::arg("has_end_value"));

  // Aliases (keyword arguments mirror torch.optim; betas split in Python).
  m.def("sgd", [](const py::object& lr, double momentum, double dampening,
                  double wd, bool nesterov, bool maximize, bool mrg, bool fused) {
    auto o = WithCommon<SgdOptions>(lr, wd, maximize, fused);
    o.momentum = momentum;
    o.dampening = dampening;
    o.nesterov = nesterov;
    o.moment_requires_grad = mrg;
    return Sgd(o);
  });
  auto adam_options = [](const py::object& lr, double b1, double b2, double eps,
                         double eps_root, double wd, bool maximize, bool mrg,
                         bool amsgrad, bool fused) {
    auto o = WithMoments<AdamOptions>(lr, b1, b2, eps, wd, maximize, mrg, fused);
    o.eps_root = eps_root;
    o.amsgrad = amsgrad;
    return o;
  };
  m.def("adam", [adam_options](const py::object& lr, double b1, double b2,
                               double eps, double eps_root, double wd,
                               bool maximize, bool mrg, bool amsgrad, bool fused) {
    return Adam(adam_options(lr, b1, b2, eps, eps_root, wd, maximize, mrg,
                             amsgrad, fused));
  });
  m.def("adamw", [adam_options](const py::object& lr, double b1, double b2,
                                double eps, double eps_root, double wd,
                                bool maximize, bool mrg, bool amsgrad,
                                std::vector<bool> mask, bool fused) {
    AdamOptions o = adam_options(lr, b1, b2, eps, eps_root, wd, maximize, mrg,
                                 amsgrad, fused);
    o.weight_decay_mask = std::move(mask);
    return AdamW(o);
  });
  m.def("adamax", [](const py::object& lr, double b1, double b2, double eps,
                     double wd, bool maximize, bool mrg, bool fused) {
    return Adamax(WithMoments<AdamaxOptions>(lr, b1, b2, eps, wd, maximize, mrg,
                                             fused));
  });
  m.def("radam", [](const py::object& lr, double b1, double b2, double eps,
                    double wd, bool maximize, bool mrg, bool fused) {
    return RAdam(WithMoments<RAdamOptions>(lr, b1, b2, eps, wd, maximize, mrg,
                                           fused));
  });
  m.def("adadelta", [](const py::object& lr, double rho, double eps, double wd,
                       bool maximize, bool mrg, bool fused) {
    auto o = WithCommon<AdadeltaOptions>(lr, wd, maximize, fused);
    o.rho = rho;
    o.eps = eps;
    o.moment_requires_grad = mrg;
    return Adadelta(o);
  });
  m.def("adagrad", [](const py::object& lr, double lr_decay, double wd,
                      double initial_accumulator_value, double eps,
                      bool maximize, bool fused) {
    auto o = WithCommon<AdagradOptions>(lr, wd, maximize, fused);
    o.lr_decay = lr_decay;
    o.initial_accumulator_value = initial_accumulator_value;
    o.eps = eps;
    return Adagrad(o);
  });
  m.def("rmsprop", [](const py::object& lr, double alpha, double eps,
                      double wd, double momentum, bool centered, bool maximize,
                      bool mrg, bool fused, double initial_scale,
                      bool nesterov) {
    auto o = WithCommon<RmsPropOptions>(lr, wd, maximize, fused);
    o.alpha = alpha;
    o.eps = eps;
    o.momentum = momentum;
    o.centered = centered;
    o.moment_requires_grad = mrg;
    o.initial_scale = initial_scale;
    o.nesterov = nesterov;
    return RmsProp(o);
  }, py::arg("lr"), py::arg("alpha"), py::arg("eps"), py::arg("weight_decay"),
        py::arg("momentum"), py::arg("centered"), py::arg("maximize"),
        py::arg("moment_requires_grad"), py::arg("fused"),
        py::arg("initial_scale") = 0.0, py::arg("nesterov") = false);
}

}  // namespace metafuse::optim
