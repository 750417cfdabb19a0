#include "frontend/compiler_bindings.h"

#include <unordered_map>
#include <unordered_set>

#include <ATen/ATen.h>
#include <pybind11/stl.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>

#include "compiler/autodiff.h"
#include "compiler/compiled_inner_loop.h"
#include "runtime/memory_meter.h"
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

// A compiled user function together with the IR of its stages (and the
// prepared program, from which counts() re-derives the two graphs).
struct CompiledUserFunction {
  std::shared_ptr<CompiledFunction> function;
  StageLog stages;
  std::shared_ptr<torch::jit::Graph> program;
  std::vector<int64_t> differentiable_inputs;
  std::shared_ptr<torch::jit::Graph> traced;  // as given, for stages()
};

// Size of the tensor value `v` had in the run (0 when unknown).
using Sizes = std::unordered_map<const torch::jit::Value*, std::vector<int64_t>>;
int64_t Numel(const Sizes& sizes, const torch::jit::Value* v) {
  auto it = sizes.find(v);
  if (it == sizes.end()) return 0;
  int64_t n = 1;
  for (int64_t d : it->second) n *= d;
  return n;
}

// Flop estimate of one node from the sizes of its values: mm 2mkn;
// reductions (and sum_to_size) the input's numel; shape, fill and scalar ops
// none; metafuse::adam the 13 elementwise ops of the generic chain it stands
// for (+1 maximize, +1 weight decay) per element; any other op (elementwise)
// the numel of its first output. Convolutions are not modelled.
double NodeFlops(const torch::jit::Node* n, const Sizes& sizes) {
  static const std::unordered_set<std::string> kFree = {
      "aten::size", "aten::numel", "aten::expand", "aten::view", "aten::reshape",
      "aten::t", "aten::transpose", "aten::unsqueeze", "aten::squeeze",
      "aten::permute", "aten::flatten", "aten::contiguous", "aten::clone",
      "aten::zeros_like", "aten::ones_like", "aten::type_as"};
  static const std::unordered_set<std::string> kReductions = {
      "aten::sum", "aten::mean", "aten::logsumexp", "aten::amax",
      "aten::sum_to_size", "aten::argmax", "aten::argmin"};
  const std::string name = n->kind().toQualString();
  if (n->kind().is_prim() || kFree.count(name) || n->outputs().empty() ||
      !n->output(0)->type()->cast<c10::TensorType>())
    return 0.0;
  if (name == "aten::mm") {
    auto a = sizes.find(n->input(0)), b = sizes.find(n->input(1));
    if (a == sizes.end() || b == sizes.end()) return 0.0;
    return 2.0 * a->second.at(0) * a->second.at(1) * b->second.at(1);
  }
  if (kReductions.count(name)) return static_cast<double>(Numel(sizes, n->input(0)));
  if (name == "metafuse::adam") {
    auto hyper = [&](const char* h) {
      return *torch::jit::toIValue(n->namedInput(c10::Symbol::attr(h)));
    };
    const double per_element = 13.0 + (hyper("maximize").toBool() ? 1.0 : 0.0) +
                               (hyper("weight_decay").toDouble() != 0.0 ? 1.0 : 0.0);
    return per_element * static_cast<double>(Numel(sizes, n->output(1)));
  }
  return static_cast<double>(Numel(sizes, n->output(0)));
}

// Runs `graph` once on `inputs` with every tensor a node produces returned
// too (so its size is known); returns (nodes without constants, flops) and
// the graph's own outputs.
std::pair<py::tuple, std::vector<c10::IValue>> CountProgram(
    const std::shared_ptr<torch::jit::Graph>& graph, std::vector<c10::IValue> inputs) {
  std::shared_ptr<torch::jit::Graph> probe = graph->copy();
  const size_t num_outputs = probe->outputs().size();
  std::vector<torch::jit::Value*> produced;
  for (torch::jit::Node* n : probe->nodes()) {
    for (torch::jit::Value* v : n->outputs()) {
      if (v->type()->cast<c10::TensorType>()) produced.push_back(v);
    }
  }
  for (torch::jit::Value* v : produced) probe->registerOutput(v);
  Sizes sizes;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].isTensor()) sizes[probe->inputs()[i]] = inputs[i].toTensor().sizes().vec();
  }
  std::vector<c10::IValue> out = runtime::Program(probe).Run(std::move(inputs));
  for (size_t i = 0; i < produced.size(); ++i) {
    sizes[produced[i]] = out[num_outputs + i].toTensor().sizes().vec();
  }
  int64_t nodes = 0;
  double flops = 0.0;
  for (const torch::jit::Node* n : probe->nodes()) {
    if (n->kind() == torch::jit::prim::Constant) continue;
    ++nodes;
    flops += NodeFlops(n, sizes);
  }
  out.resize(num_outputs);
  return {py::make_tuple(nodes, flops), std::move(out)};
}

py::dict ReportDict(const SpecializationReport& r) {
  py::dict d;
  d["nodes_before"] = r.nodes_before;
  d["nodes_specialized"] = r.nodes_specialized;
  d["nodes_after"] = r.nodes_after;
  d["shape_queries_folded"] = r.shape_queries_folded;
  d["identities_removed"] = r.identities_removed;
  d["gemms"] = r.gemms;
  d["fusion_groups"] = r.fusion_groups;
  d["fused_nodes"] = r.fused_nodes;
  d["horizontal_nodes"] = r.horizontal_nodes;
  d["horizontal_segments"] = r.horizontal_segments;
  d["planned_reuses"] = r.planned_reuses;
  d["instructions"] = r.instructions;
  d["seconds"] = r.seconds;
  d["fallback"] = r.fallback;
  return d;
}

// set_fusion / fusion_report / fused_listing for a class holding a
// CompiledFunction (reached through `get`).
template <typename Class, typename Get>
void BindFusionMethods(Class& cls, Get get) {
  cls.def("set_fusion", [get](const typename Class::type& self, bool enabled) {
       get(self).set_fusion(enabled);
     }, py::arg("enabled"))
      .def("fusion", [get](const typename Class::type& self) { return get(self).fusion(); })
      // What specialization and fusion did for the most recent input
      // signature (empty before the first call with fusion on).
      .def("fusion_report", [get](const typename Class::type& self) {
        py::dict d;
        auto pair = get(self).last_pair();
        if (!pair) return d;
        d["forward"] = ReportDict(pair->forward_report);
        d["backward"] = ReportDict(pair->backward_report);
        d["saved_before"] = pair->saved_before;
        d["saved_after"] = pair->saved_after;
        d["rematerialized"] = pair->rematerialized;
        return d;
      })
      .def("fused_listing", [get](const typename Class::type& self) {
        auto pair = get(self).last_pair();
        if (!pair) return py::make_tuple(std::string(), std::string());
        return py::make_tuple(pair->forward->Listing(), pair->backward->Listing());
      });
}

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

  py::class_<CompiledInnerLoop, std::shared_ptr<CompiledInnerLoop>> inner_loop(
      m, "CompiledInnerLoop");
  BindFusionMethods(inner_loop,
                    [](const CompiledInnerLoop& l) -> CompiledFunction& { return l.function(); });
  inner_loop.def("__call__", &CompiledInnerLoop::operator(), py::arg("inputs"))
      .def("stages",
           [](const CompiledInnerLoop& loop) { return loop.stages(); })
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

  py::class_<CompiledUserFunction, std::shared_ptr<CompiledUserFunction>> user_function(
      m, "CompiledFunction");
  BindFusionMethods(user_function, [](const CompiledUserFunction& f) -> CompiledFunction& {
    return *f.function;
  });
  user_function.def("__call__",
           [](const CompiledUserFunction& f, const std::vector<at::Tensor>& inputs) {
             return (*f.function)(inputs);
           })
      .def("stages", [](const CompiledUserFunction& f) {
        if (f.stages.keeps_snapshots()) return f.stages.stages();
        // The compile stages come from compiling again, snapshots kept (the
        // pipeline is deterministic); then this function's specializations.
        StageLog log;
        std::shared_ptr<torch::jit::Graph> graph = f.traced->copy();
        PrepareCapturedGraph(graph, &log);
        CompiledFunction::Build(graph, f.differentiable_inputs, &log);
        std::vector<std::pair<std::string, std::string>> result = log.stages();
        for (const auto& stage : f.stages.stages()) result.push_back(stage);
        return result;
      })
      // {"forward"|"backward": (nodes, flops)} of the unfused programs, run
      // once on `inputs` (cotangents of ones) to learn every value's size.
      .def("counts",
           [](const CompiledUserFunction& f, const std::vector<at::Tensor>& inputs) {
             SplitProgram split = BuildMetaBackward(f.program, f.differentiable_inputs,
                                                   /*log=*/nullptr);
             auto [forward, out] = CountProgram(
                 split.forward, std::vector<c10::IValue>(inputs.begin(), inputs.end()));
             std::vector<c10::IValue> backward_inputs(out.begin() + split.num_outputs,
                                                      out.end());
             for (int64_t i = 0; i < split.num_outputs; ++i) {
               backward_inputs.push_back(at::ones_like(out[i].toTensor()));
             }
             auto backward = CountProgram(split.backward, std::move(backward_inputs));
             py::dict result;
             result["forward"] = forward;
             result["backward"] = backward.first;
             return result;
           },
           py::arg("inputs"))
      .def_property_readonly("forward_instructions", [](const CompiledUserFunction& f) {
        return f.function->forward_program().num_instructions();
      })
      .def_property_readonly("backward_instructions", [](const CompiledUserFunction& f) {
        return f.function->backward_program().num_instructions();
      });

  // Live CPU tensor bytes (runtime/memory_meter.h), for benchmarks.
  m.def("install_memory_meter", &runtime::InstallMemoryMeter);
  m.def("reset_peak_memory", &runtime::ResetPeakMemory);
  m.def("memory_stats", [] {
    TORCH_CHECK(runtime::MemoryMeterInstalled(),
                "memory_stats: call install_memory_meter() first");
    runtime::MemoryStats s = runtime::GetMemoryStats();
    py::dict d;
    d["live_bytes"] = s.live_bytes;
    d["peak_bytes"] = s.peak_bytes;
    d["allocations"] = s.allocations;
    return d;
  });

  // Runs `graph` through SpecializingProgram (specialize, fuse, plan, JIT)
  // or the generic program; `runs` times, returning the last outputs and
  // the specialization report. For tests and debugging of the passes.
  m.def(
      "run_specialized",
      [](const std::shared_ptr<torch::jit::Graph>& graph, const std::vector<at::Tensor>& inputs,
         bool fusion, int64_t runs) {
        StageLog log;
        SpecializingProgram program(graph->copy(), "program", &log);
        program.set_fusion(fusion);
        std::vector<c10::IValue> out;
        for (int64_t r = 0; r < runs; ++r) {
          out = program.Run(std::vector<c10::IValue>(inputs.begin(), inputs.end()));
        }
        std::vector<at::Tensor> tensors;
        for (const auto& v : out) tensors.push_back(v.toTensor());
        std::string fused = log.stages().empty() ? "" : log.stages().back().second;
        return py::make_tuple(tensors, ReportDict(program.report()), fused);
      },
      py::arg("graph"), py::arg("inputs"), py::arg("fusion") = true, py::arg("runs") = 1);

  m.def(
      "compile_function",
      [](const std::shared_ptr<torch::jit::Graph>& traced,
         const std::vector<int64_t>& differentiable_inputs) {
        py::gil_scoped_release no_gil;
        auto out = std::make_shared<CompiledUserFunction>();
        out->stages.set_keep_snapshots(false);
        out->traced = traced->copy();
        std::shared_ptr<torch::jit::Graph> graph = traced->copy();
        PrepareCapturedGraph(graph, &out->stages);
        out->function = CompiledFunction::Build(graph, differentiable_inputs,
                                                &out->stages);
        out->program = graph;
        out->differentiable_inputs = differentiable_inputs;
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
