// Fused Adam/AdamW forward and first-order backward on CUDA, torch-free (raw device pointers and a
// cudaStream_t): Debian's LibTorch is a CPU build, so these kernels are not
// registered as torch CUDA kernels; the runtime and the compiler call them.
// The math is kernels/optim_math.h's AdamElement, the same as on the CPU.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/optim_math.h"

namespace metafuse::kernels::cuda {

// One tensor of a multi-tensor step: inputs (param may be null when
// coefficients l2 and decoupled are 0) and outputs, all n elements long.
template <typename T>
struct AdamTensor {
  const T* grad = nullptr;
  const T* param = nullptr;
  const T* mu = nullptr;
  const T* nu = nullptr;
  T* update = nullptr;
  T* mu_out = nullptr;
  T* nu_out = nullptr;
  T* root = nullptr;  // optional: r = sqrt(nu_hat + eps_root), for the backward
  int64_t n = 0;
  // In place: `update` is the param and gets param + update; mu_out / nu_out
  // are mu / nu (each element is read before it is written, by one thread).
  bool accumulate = false;
};

// One tensor of the first-order backward (AdamBackwardElement): the saved
// grad, param (null without weight decay), mu' and r, the incoming gradients
// of update, mu' and nu', and the four gradients it writes (grad_param only
// with a param).
template <typename T>
struct AdamGradTensor {
  const T* grad = nullptr;
  const T* param = nullptr;
  const T* mu_new = nullptr;
  const T* root = nullptr;
  const T* grad_update = nullptr;
  const T* grad_mu_new = nullptr;
  const T* grad_nu_new = nullptr;
  T* grad_grad = nullptr;
  T* grad_param = nullptr;
  T* grad_mu = nullptr;
  T* grad_nu = nullptr;
  int64_t n = 0;
};

// Updates all `num_tensors` tensors on `stream`: one launch per batch of up
// to kTensorsPerLaunch tensors, each launch parallel over the batch's total
// element count. Every launch is checked; the first failure is returned
// (cudaSuccess otherwise) and `failed_launch` says which batch failed.
constexpr int kTensorsPerLaunch = 32;  // = kBatchCapacity (batch_launch.cuh)

template <typename T>
cudaError_t AdamMultiForward(const AdamCoeffs<T>& coeffs,
                             const AdamTensor<T>* tensors, int num_tensors,
                             cudaStream_t stream, int* failed_launch);

template <typename T>
cudaError_t AdamMultiBackward(const AdamCoeffs<T>& coeffs,
                              const AdamGradTensor<T>* tensors,
                              int num_tensors, cudaStream_t stream,
                              int* failed_launch);

}  // namespace metafuse::kernels::cuda
