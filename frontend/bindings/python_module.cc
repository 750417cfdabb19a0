// metafuse._C: the pybind11 extension. Importing it registers every
// `metafuse::` operator with the torch dispatcher (they are then reachable as
// torch.ops.metafuse.*) and exposes what Python needs of the C++ runtime.
#include <torch/extension.h>

#include "frontend/bindings/compiler_bindings.h"
#include "frontend/bindings/diff_bindings.h"
#include "frontend/bindings/optim_bindings.h"
#include "frontend/bindings/tuning_bindings.h"
#include "kernels/ema_update.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/jit/llvm_jit.h"
#include "tree/python/bindings.h"

namespace py = pybind11;

namespace {

// Which optional parts of the runtime this build and this machine support.
py::dict BuildInfo() {
  py::dict info;
  info["torch_version"] = TORCH_VERSION;
#ifdef METAFUSE_HAS_NVRTC
  info["nvrtc"] = true;
#else
  info["nvrtc"] = false;
#endif
#ifdef METAFUSE_WITH_CUDA_TORCH
  info["cuda_torch"] = true;  // the fused operators' CUDA registration
#else
  info["cuda_torch"] = false;
#endif
  info["llvm"] = metafuse::runtime::LlvmAvailable();
  auto jit = metafuse::runtime::LlvmJit::Create();
  info["llvm_host"] = jit.ok() ? jit.value()->HostDescription()
                               : std::string(jit.status().message());
  return info;
}

// (available, reason): why CUDA can or cannot be used here, never a crash.
py::tuple CudaStatus() {
  auto driver = metafuse::runtime::CudaDriver::Load();
  if (!driver.ok()) {
    return py::make_tuple(false, std::string(driver.status().message()));
  }
  return py::make_tuple(
      true, std::to_string(driver.value()->device_count) + " CUDA device(s)");
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "metafuse C++ core (operators, runtime)";
  metafuse::optim::BindOptim(m);
  metafuse::diff::BindDiff(m);
  metafuse::compiler::BindCompiler(m);
  metafuse::runtime::BindTuning(m);
  metafuse::tree::BindTree(m);
  m.def("build_info", &BuildInfo,
        "Versions and optional features of this metafuse build.");
  m.def("cuda_status", &CudaStatus,
        "(available, reason): whether the CUDA driver can be used here.");
  m.def("ema_update", &metafuse::ema_update, py::arg("moment"),
        py::arg("update"), py::arg("decay"), py::arg("order"),
        "decay * moment + (1 - decay) * update**order, fused, differentiable.");
}
