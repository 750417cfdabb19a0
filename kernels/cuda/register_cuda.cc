// The CUDA form of the fused optimizer operators' element loop, for builds
// against a CUDA torch (METAFUSE_WITH_CUDA_TORCH; the Bazel build against
// Debian's CPU LibTorch leaves it off, and this file compiles to nothing).
// The operators themselves are registered for the CUDA and AutogradCUDA keys
// by METAFUSE_REGISTER_FUSED_OP (kernels/fused_op.h); their forward reaches
// RunCudaLoop (kernels/fused_step.h), which calls the function below: the
// torch-free multi-tensor kernels of adam_kernels.h and step_kernels.h
// (one launch per batch of 32 tensors) on torch's current stream, with the
// coefficients the CPU loop uses. The backward is the CPU ops' exact closed
// form on tensors (Opt::Backward), which runs on any device.
#ifdef METAFUSE_WITH_CUDA_TORCH

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <cstring>
#include <vector>

#include "kernels/cuda/adam_kernels.h"
#include "kernels/cuda/step_kernels.h"
#include "kernels/fused_step.h"

namespace metafuse::kernels {
namespace {

template <typename T>
T* Ptr(const at::Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}

void Check(cudaError_t e, int failed_launch, const CudaLoopArgs& a) {
  TORCH_CHECK(e == cudaSuccess, "metafuse::", a.op, ": CUDA launch ", failed_launch,
              " failed: ", cudaGetErrorString(e));
}

template <typename T>
void RunAdam(const CudaLoopArgs& a, cudaStream_t stream) {
  const auto& g = *a.g;
  std::vector<cuda::AdamTensor<T>> ts(g.size());
  for (size_t k = 0; k < g.size(); ++k) {
    auto& t = ts[k];
    t.grad = Ptr<T>(g[k]);
    t.param = a.p->empty() ? nullptr : Ptr<T>((*a.p)[k]);
    t.mu = Ptr<T>((*a.s)[0][k]);
    t.nu = Ptr<T>((*a.s)[1][k]);
    t.update = Ptr<T>((*a.u)[k]);
    t.mu_out = Ptr<T>((*a.so)[0][k]);
    t.nu_out = Ptr<T>((*a.so)[1][k]);
    t.root = a.aux->empty() ? nullptr : Ptr<T>((*a.aux)[0][k]);
    t.n = g[k].numel();
    t.accumulate = a.in_place;
  }
  int failed = -1;
  Check(cuda::AdamMultiForward<T>(*static_cast<const AdamCoeffs<T>*>(a.coeffs), ts.data(),
                                  static_cast<int>(ts.size()), stream, &failed),
        failed, a);
}

// The other optimizers: fixed state slots (step_kernels.h), no aux.
template <typename T, typename Coeffs>
void RunStep(const CudaLoopArgs& a, cudaStream_t stream,
             cudaError_t (*launch)(const Coeffs&, const cuda::StepTensor<T>*, int, cudaStream_t,
                                   int*)) {
  TORCH_CHECK(a.aux->empty(), "metafuse::", a.op,
              ": differentiating through the CUDA step needs its saved square roots, which "
              "only Adam's CUDA kernel writes; differentiate this optimizer on the CPU");
  const auto& g = *a.g;
  std::vector<cuda::StepTensor<T>> ts(g.size());
  for (size_t k = 0; k < g.size(); ++k) {
    auto& t = ts[k];
    t.grad = Ptr<T>(g[k]);
    t.param = a.p->empty() ? nullptr : Ptr<T>((*a.p)[k]);
    for (size_t j = 0; j < a.state_slots.size(); ++j) {
      t.state[a.state_slots[j]] = Ptr<T>((*a.s)[j][k]);
      t.state_out[a.state_slots[j]] = Ptr<T>((*a.so)[j][k]);
    }
    t.update = Ptr<T>((*a.u)[k]);
    t.n = g[k].numel();
    t.accumulate = a.in_place;
  }
  int failed = -1;
  Check(launch(*static_cast<const Coeffs*>(a.coeffs), ts.data(), static_cast<int>(ts.size()),
               stream, &failed),
        failed, a);
}

template <typename T>
void RunTyped(const CudaLoopArgs& a, cudaStream_t stream) {
  const std::string op = a.op;
  if (op == "adam") return RunAdam<T>(a, stream);
  if (op == "sgd") return RunStep<T, SgdCoeffs<T>>(a, stream, &cuda::SgdMultiForward<T>);
  if (op == "rmsprop") {
    return RunStep<T, RmsPropCoeffs<T>>(a, stream, &cuda::RmsPropMultiForward<T>);
  }
  if (op == "adagrad") {
    return RunStep<T, AdagradCoeffs<T>>(a, stream, &cuda::AdagradMultiForward<T>);
  }
  if (op == "adamax") return RunStep<T, AdamaxCoeffs<T>>(a, stream, &cuda::AdamaxMultiForward<T>);
  if (op == "adadelta") {
    return RunStep<T, AdadeltaCoeffs<T>>(a, stream, &cuda::AdadeltaMultiForward<T>);
  }
  if (op == "radam") return RunStep<T, RAdamCoeffs<T>>(a, stream, &cuda::RAdamMultiForward<T>);
  TORCH_CHECK(false, "metafuse::", op, " has no CUDA kernel");
}

void RunOnCuda(const CudaLoopArgs& a) {
  const at::Tensor& first = (*a.g)[0];
  const c10::cuda::CUDAGuard guard(first.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream(first.device().index()).stream();
  if (a.dtype == at::kFloat) {
    RunTyped<float>(a, stream);
  } else {
    RunTyped<double>(a, stream);
  }
}

// Installed when the library loads, before any operator can run.
const bool registered = [] {
  RegisteredCudaLoop() = &RunOnCuda;
  return true;
}();

}  // namespace
}  // namespace metafuse::kernels

#endif  // METAFUSE_WITH_CUDA_TORCH
