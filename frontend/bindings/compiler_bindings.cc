#include "frontend/bindings/compiler_bindings.h"

#include <optional>
#include <sstream>

#include <ATen/ATen.h>
#include <pybind11/stl.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>

#include "compiler/autodiff/autodiff.h"
#include "compiler/callable/compiled_inner_loop.h"
#include "compiler/ir/flop_count.h"
#include "compiler/lowering/lower_to_program.h"
#include "compiler/pipeline.h"
#include "runtime/program_value/artifact_signature.h"
#include "runtime/program_value/program_serialization.h"
#include "runtime/executor/fused_kernel_launch.h"
#include "runtime/jit/kernel_ir_rebuild.h"
#include "runtime/jit/host_backend.h"
#include "runtime/executor/host_object_code.h"
#include "runtime/base/memory_meter.h"
#include "runtime/base/profiler.h"

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

py::dict ReportDict(const SpecializationReport& r) {
  py::dict d;
  d["nodes_before"] = r.nodes_before;
  d["nodes_specialized"] = r.nodes_specialized;
  d["nodes_after"] = r.nodes_after;
  d["shape_queries_folded"] = r.shape_queries_folded;
  d["identities_removed"] = r.identities_removed;
  d["gemms"] = r.gemms;
  d["grouped_convolutions"] = r.grouped_convolutions;
  d["split_convolutions"] = r.split_convolutions;
  d["fusion_groups"] = r.fusion_groups;
  d["fused_nodes"] = r.fused_nodes;
  d["horizontal_nodes"] = r.horizontal_nodes;
  d["horizontal_segments"] = r.horizontal_segments;
  d["fused_reductions"] = r.fused_reductions;
  d["pooled_kernels"] = r.pooled_kernels;
  d["merged_groups"] = r.merged_groups;
  d["planned_reuses"] = r.planned_reuses;
  d["instructions"] = r.instructions;
  d["seconds"] = r.seconds;
  d["fallback"] = r.fallback;
  return d;
}

// What every compiled object binds (reached through `get`, which returns
// its SpecializingFunction): fusion on/off and its reports, the stages'
// IR, listings, the program value.
template <typename Class, typename Get>
void BindFunctionMethods(Class& cls, Get get) {
  using Self = typename Class::type;
  cls.def("set_fusion", [get](const Self& self, bool enabled) { get(self).set_fusion(enabled); },
          py::arg("enabled"))
      .def("fusion", [get](const Self& self) { return get(self).fusion(); })
      // What specialization and fusion did for the most recent input
      // signature (empty before the first call with fusion on).
      .def("fusion_report", [get](const Self& self) {
        py::dict d;
        auto last = get(self).last_specialization();
        if (!last) return d;
        d["forward"] = ReportDict(last->info.forward_report);
        d["backward"] = ReportDict(last->info.backward_report);
        d["saved_before"] = last->info.saved_before;
        d["saved_after"] = last->info.saved_after;
        d["rematerialized"] = last->info.rematerialized;
        return d;
      })
      .def("fused_listing", [get](const Self& self) {
        auto last = get(self).last_specialization();
        if (!last) return py::make_tuple(std::string(), std::string());
        return py::make_tuple(last->executable->forward.Listing(),
                              last->executable->backward.Listing());
      })
      .def("stages", [get](const Self& self) { return get(self).stages(); })
      .def_property_readonly("forward_instructions", [get](const Self& self) {
        return get(self).generic().forward.num_instructions();
      })
      .def_property_readonly("backward_instructions", [get](const Self& self) {
        return get(self).generic().backward.num_instructions();
      })
      .def("listing", [get](const Self& self) {
        return py::make_tuple(get(self).generic().forward.Listing(),
                              get(self).generic().backward.Listing());
      })
      // The program value a call with `inputs` runs (specialized to them
      // with fusion on).
      .def("program", [](const Self& self, const std::vector<at::Tensor>& inputs) {
        return self.ProgramFor(inputs);  // a looped inner loop's carries its loop
      }, py::arg("inputs"))
      // {"forward"|"backward": (nodes, flops)} of the unfused programs, run
      // once on `inputs` (cotangents of ones) to learn every value's size.
      .def("counts", [get](const Self& self, const std::vector<at::Tensor>& inputs) {
        ProgramCounts c = CountSplitProgram(get(self).split(), inputs);
        py::dict result;
        result["forward"] = py::make_tuple(c.forward.nodes, c.forward.flops);
        result["backward"] = py::make_tuple(c.backward.nodes, c.backward.flops);
        return result;
      }, py::arg("inputs"));
}

}  // namespace

void BindCompiler(py::module_& parent) {
  py::module_ m = parent.def_submodule("_compiler", "metafuse's compiler (C++).");
  // pybind11's own registration: translates UnsupportedOp to a Python
  // subclass of RuntimeError. (A static py::exception called from a
  // translator is deprecated from pybind11 2.12, the version torch 2.x
  // builds bring.)
  py::register_exception<UnsupportedOp>(m, "UnsupportedOp", PyExc_RuntimeError);

  py::class_<CompiledInnerLoop, std::shared_ptr<CompiledInnerLoop>> inner_loop(
      m, "CompiledInnerLoop");
  BindFunctionMethods(inner_loop, [](const CompiledInnerLoop& l) -> SpecializingFunction& {
    return l.function();
  });
  // Calls run without the GIL: metafuse.vmap runs chunks of a meta-batch on
  // several threads at once (batching.py), and nothing in a run is Python.
  inner_loop.def("__call__", &CompiledInnerLoop::operator(), py::arg("inputs"),
                 py::call_guard<py::gil_scoped_release>());
  // A looped loop: its body's SpecializingFunction and its step-0 inputs
  // (what the fusion check times), and the last run's schedule.
  inner_loop.def_property_readonly("looped", &CompiledInnerLoop::looped)
      .def("body", [](const CompiledInnerLoop& l) { return l.function().shared_from_this(); })
      .def("body_inputs", &CompiledInnerLoop::BodyInputs, py::arg("inputs"))
      .def("schedule", [](const CompiledInnerLoop& l) -> py::object {
        auto s = l.last_schedule();
        if (!s) return py::none();
        py::dict d;
        d["steps"] = s->steps;
        d["store_all"] = s->store_all;
        d["snapshots"] = s->snapshots;
        d["state_bytes"] = s->state_bytes;
        d["saved_bytes_per_step"] = s->saved_bytes_per_step;
        d["planned_recomputed_steps"] = s->planned_recomputed_steps;
        d["recomputed_steps"] = s->recomputed_steps;
        d["kept_bytes"] = s->kept_bytes;
        d["description"] = s->Describe();
        return d;
      });

  py::class_<SpecializingFunction, std::shared_ptr<SpecializingFunction>> function(
      m, "SpecializingFunction");
  BindFunctionMethods(function, [](const SpecializingFunction& f) -> SpecializingFunction& {
    return const_cast<SpecializingFunction&>(f);
  });
  function.def("__call__", &SpecializingFunction::operator(), py::arg("inputs"),
               py::call_guard<py::gil_scoped_release>());

  // The compiled program as a value (runtime/program_value/program_code.h).
  py::class_<runtime::CompiledProgram>(m, "CompiledProgram")
      .def("dump", [](const runtime::CompiledProgram& p) { return runtime::Dump(p); })
      .def("serialize", [](const runtime::CompiledProgram& p) {
        return py::bytes(runtime::SerializeProgram(p));
      })
      .def_readonly("num_inputs", &runtime::CompiledProgram::num_inputs)
      .def_readonly("num_outputs", &runtime::CompiledProgram::num_outputs)
      .def_readonly("differentiable_inputs", &runtime::CompiledProgram::differentiable_inputs)
      .def_readonly("versions", &runtime::CompiledProgram::versions)
      // A looped inner loop's program: its steps (0 for any other program).
      .def_property_readonly("loop_steps",
                             [](const runtime::CompiledProgram& p) { return p.loop.steps; })
      .def_property_readonly("num_kernels", [](const runtime::CompiledProgram& p) {
        return p.forward.kernels.size() + p.backward.kernels.size();
      })
      // Host code for artifacts (runtime/executor/host_object_code.h): LLVM object
      // code per kernel, a C++ shared object per program.
      .def("attach_object_code", [](runtime::CompiledProgram& p) {
        absl::Status s = runtime::AttachObjectCode(p);
        if (!s.ok()) throw std::runtime_error(std::string(s.message()));
      })
      .def("check_object_targets", [](const runtime::CompiledProgram& p) {
        absl::Status s = runtime::CheckObjectTargets(p);
        if (!s.ok()) throw py::value_error(std::string(s.message()));
      })
      .def("rebuild_kernels_from_kernel_ir", [](runtime::CompiledProgram& p) {
        absl::Status s = runtime::RebuildKernelsFromKernelIr(p);
        if (!s.ok()) throw py::value_error(std::string(s.message()));
      })
      .def_property_readonly("object_targets", [](const runtime::CompiledProgram& p) {
        std::vector<std::string> targets;
        for (const auto* code : {&p.forward, &p.backward}) {
          for (const auto& k : code->kernels) targets.push_back(k.object_target);
        }
        return targets;
      })
      .def_property_readonly("shared_objects", [](const runtime::CompiledProgram& p) {
        py::dict out;  // program label -> (x86-64 level, bytes) where one is attached
        for (const auto* code : {&p.forward, &p.backward}) {
          if (code->shared_object.empty()) continue;
          out[py::str(code->label)] =
              py::make_tuple(code->shared_object_target, code->shared_object.size());
        }
        return out;
      });
  m.def("fused_kernel_stats", [] {
    const runtime::FusedKernelStats s = runtime::GetFusedKernelStats();
    return py::dict(py::arg("compiled") = s.kernels_compiled,
                    py::arg("from_disk") = s.kernels_from_disk,
                    py::arg("from_memory") = s.kernels_from_memory,
                    py::arg("from_artifact") = s.kernels_from_artifact,
                    py::arg("libraries_compiled") = s.libraries_compiled,
                    py::arg("libraries_from_disk") = s.libraries_from_disk,
                    py::arg("libraries_from_artifact") = s.libraries_from_artifact);
  });
  m.def("pipeline_stages", [] {
    py::list out;  // (phase, name, file), in the order the driver runs them
    for (const compiler::PipelineStage& s : compiler::PipelineStages()) {
      out.append(py::make_tuple(s.phase, s.name, s.file));
    }
    return out;
  });
  m.def("host_backend", [] {
    auto b = runtime::SelectedHostBackend();
    if (!b.ok()) throw py::value_error(std::string(b.status().message()));
    return std::string(runtime::HostBackendName(*b));
  });
  // Artifact signatures (runtime/program_value/artifact_signature.h).
  m.def("sign_artifact", [](const py::bytes& zip, const py::bytes& key) {
    auto signed_bytes = runtime::SignArtifact(std::string(zip), std::string(key));
    if (!signed_bytes.ok()) throw py::value_error(std::string(signed_bytes.status().message()));
    return py::bytes(*signed_bytes);
  }, py::arg("zip"), py::arg("key"));
  m.def("artifact_signature", [](const py::bytes& data, std::optional<py::bytes> key) {
    // (state, description): state "unsigned", "not verified" or "verified";
    // a signature the key does not verify raises PermissionError.
    std::optional<std::string> raw;
    if (key) raw = std::string(*key);
    auto state = runtime::CheckArtifactSignature(std::string(data), raw ? &*raw : nullptr);
    if (!state.ok()) {
      if (absl::IsPermissionDenied(state.status())) {
        PyErr_SetString(PyExc_PermissionError, std::string(state.status().message()).c_str());
        throw py::error_already_set();
      }
      throw py::value_error(std::string(state.status().message()));
    }
    const char* names[] = {"unsigned", "not verified", "verified"};
    return py::make_tuple(names[static_cast<int>(*state)],
                          runtime::DescribeArtifactSignature(*state, raw ? &*raw : nullptr));
  }, py::arg("data"), py::arg("key"));
  m.def("parse_artifact_key", [](const std::string& text, const std::string& source) {
    auto key = runtime::ParseArtifactKey(text, source);
    if (!key.ok()) throw py::value_error(std::string(key.status().message()));
    return py::bytes(*key);
  }, py::arg("text"), py::arg("source"));
  m.def("check_artifact_key", [](const py::bytes& key, const std::string& source) {
    absl::Status s = runtime::CheckArtifactKey(std::string(key), source);
    if (!s.ok()) throw py::value_error(std::string(s.message()));
  }, py::arg("key"), py::arg("source"));
  m.def("read_artifact_key_file", [](const std::string& path) {
    auto key = runtime::ReadArtifactKeyFile(path);
    if (!key.ok()) throw py::value_error(std::string(key.status().message()));
    return py::bytes(*key);
  }, py::arg("path"));
  m.def("artifact_key_from_environment", []() -> std::optional<py::bytes> {
    auto key = runtime::ArtifactKeyFromEnvironment();
    if (!key.ok()) throw py::value_error(std::string(key.status().message()));
    if (!*key) return std::nullopt;
    return py::bytes(**key);
  });
  m.def("deserialize_program", [](const py::bytes& bytes) {
    auto p = runtime::DeserializeProgram(std::string(bytes));
    if (!p.ok()) throw py::value_error(p.status().ToString());
    return *std::move(p);
  }, py::arg("data"));
  // A program value made runnable (one autograd node per call).
  py::class_<runtime::ExecutableProgram, std::shared_ptr<runtime::ExecutableProgram>>(
      m, "ExecutableProgram")
      .def(py::init([](const runtime::CompiledProgram& p) {
        return std::make_shared<runtime::ExecutableProgram>(p);
      }), py::arg("program"))
      .def("__call__", [](const std::shared_ptr<runtime::ExecutableProgram>& self,
                          const std::vector<at::Tensor>& inputs) {
        if (!self->guard.empty()) {
          TORCH_CHECK(runtime::InputSignature(std::vector<c10::IValue>(
                          inputs.begin(), inputs.end())) == self->guard,
                      "compiled program: the inputs' dtypes, devices or shapes differ from "
                      "those it was specialized for");
        }
        return runtime::RunDifferentiable(self, inputs);
      }, py::arg("inputs"), py::call_guard<py::gil_scoped_release>());

  py::class_<ProfileHandle>(m, "Profile")
      .def(py::init<>())
      .def("start", &ProfileHandle::Start)
      .def("stop", &ProfileHandle::Stop)
      .def_readonly("summary", &ProfileHandle::summary)
      .def_readonly("chrome_trace", &ProfileHandle::trace)
      .def_readonly("num_events", &ProfileHandle::num_events);

  // Live CPU tensor bytes (runtime/base/memory_meter.h), for benchmarks.
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

  // Runs `graph` through phase 2 of the pipeline (specialize, fuse, plan,
  // lower) or as it is; `runs` times, returning the last outputs and the
  // specialization report. For tests and debugging of the passes.
  m.def(
      "run_specialized",
      [](const std::shared_ptr<torch::jit::Graph>& graph, const std::vector<at::Tensor>& inputs,
         bool fusion, int64_t runs) {
        const std::vector<c10::IValue> in(inputs.begin(), inputs.end());
        SpecializationReport report;
        std::string fused;
        std::optional<runtime::Program> program;
        if (fusion) {
          SpecializedGraph s =
              SpecializeGraph(*graph, in, runtime::OptionsFromEnvironment(), "program", nullptr);
          report = s.report;
          std::ostringstream os;
          os << *s.fused;
          fused = os.str();
          program.emplace(std::move(s.code));
        } else {
          program.emplace(LowerToProgram(*graph, "program"));
        }
        std::vector<c10::IValue> out;
        for (int64_t r = 0; r < runs; ++r) out = program->Run(in);
        std::vector<at::Tensor> tensors;
        for (const auto& v : out) tensors.push_back(v.toTensor());
        return py::make_tuple(tensors, ReportDict(report), fused);
      },
      py::arg("graph"), py::arg("inputs"), py::arg("fusion") = true, py::arg("runs") = 1);

  m.def(
      "compile_function",
      [](const std::shared_ptr<torch::jit::Graph>& traced,
         const std::vector<int64_t>& differentiable_inputs) {
        py::gil_scoped_release no_gil;
        CompileRequest request;
        request.captured = traced->copy();
        request.differentiable_inputs = differentiable_inputs;
        return SpecializingFunction::Compile(std::move(request));
      },
      py::arg("graph"), py::arg("differentiable_inputs"));

  py::class_<InnerLoopLayout>(m, "InnerLoopLayout")
      .def(py::init([](int64_t num_params, int64_t num_batch, int64_t num_extra, int64_t steps,
                       bool return_losses, bool looped, int64_t memory_budget) {
             return InnerLoopLayout{num_params, num_batch,     num_extra,    steps,
                                    return_losses, looped, memory_budget};
           }),
           py::kw_only(), py::arg("num_params"), py::arg("num_batch"), py::arg("num_extra") = 0,
           py::arg("steps") = 1, py::arg("return_losses") = false, py::arg("looped") = false,
           py::arg("memory_budget") = -1)
      .def_readwrite("num_params", &InnerLoopLayout::num_params)
      .def_readwrite("num_batch", &InnerLoopLayout::num_batch)
      .def_readwrite("num_extra", &InnerLoopLayout::num_extra)
      .def_readwrite("steps", &InnerLoopLayout::steps)
      .def_readwrite("return_losses", &InnerLoopLayout::return_losses)
      .def_readwrite("looped", &InnerLoopLayout::looped)
      .def_readwrite("memory_budget", &InnerLoopLayout::memory_budget);

  py::class_<OptimizerSpec>(m, "OptimizerSpec")
      .def(py::init([](const std::string& kind, double lr, bool lr_is_input, bool lr_per_param,
                       double weight_decay, bool maximize, double b1, double b2, double eps,
                       double eps_root, double momentum, double dampening, bool nesterov) {
             return OptimizerSpec{kind,     lr,        lr_is_input, lr_per_param, weight_decay,
                                  maximize, b1,        b2,          eps,          eps_root,
                                  momentum, dampening, nesterov};
           }),
           py::kw_only(), py::arg("kind") = "sgd", py::arg("lr") = 0.1,
           py::arg("lr_is_input") = false, py::arg("lr_per_param") = false,
           py::arg("weight_decay") = 0.0, py::arg("maximize") = false, py::arg("b1") = 0.9,
           py::arg("b2") = 0.999, py::arg("eps") = 1e-8, py::arg("eps_root") = 0.0,
           py::arg("momentum") = 0.0, py::arg("dampening") = 0.0, py::arg("nesterov") = false)
      .def_readwrite("kind", &OptimizerSpec::kind)
      .def_readwrite("lr", &OptimizerSpec::lr);

  m.def(
      "compile",
      [](const std::shared_ptr<torch::jit::Graph>& graph, const InnerLoopLayout& layout,
         const OptimizerSpec& optimizer) {
        py::gil_scoped_release no_gil;
        return CompiledInnerLoop::Compile(graph, layout, optimizer);
      },
      py::arg("graph"), py::arg("layout"), py::arg("optimizer"));
}

}  // namespace metafuse::compiler
