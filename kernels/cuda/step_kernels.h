// Fused forward steps of SGD, RMSProp, Adagrad, Adamax, Adadelta and RAdam on
// CUDA, torch-free like adam_kernels.h: raw device pointers, the caller's
// stream, every launch checked, one launch per batch of up to 32 tensors.
// The math is kernels/optim_math.h's, the coefficients its Make*Coeffs.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/optim_math.h"

namespace metafuse::kernels::cuda {

// One tensor of a step. State slots are fixed per optimizer (a null slot is
// an absent optional state, read as 0 and not written):
//   sgd       s[0] momentum_buffer
//   rmsprop   s[0] square_avg, s[1] grad_avg (centered), s[2] momentum_buffer
//   adagrad   s[0] sum
//   adamax    s[0] mu, s[1] inf_norm
//   adadelta  s[0] square_avg, s[1] acc_delta
//   radam     s[0] mu, s[1] nu
// `param` may be null when the options use no weight decay.
template <typename T>
struct StepTensor {
  const T* grad = nullptr;
  const T* param = nullptr;
  const T* state[3] = {nullptr, nullptr, nullptr};
  T* update = nullptr;
  T* state_out[3] = {nullptr, nullptr, nullptr};
  int64_t n = 0;
  bool accumulate = false;  // in place: update is the param, += (AdamTensor)
};

// Each returns the first launch error (cudaSuccess otherwise); *failed_launch
// says which launch failed.
#define METAFUSE_DECLARE_STEP(NAME, COEFFS)                                 \
  template <typename T>                                                     \
  cudaError_t NAME(const COEFFS<T>& coeffs, const StepTensor<T>* tensors,   \
                   int num_tensors, cudaStream_t stream, int* failed_launch);
METAFUSE_DECLARE_STEP(SgdMultiForward, SgdCoeffs)
METAFUSE_DECLARE_STEP(RmsPropMultiForward, RmsPropCoeffs)
METAFUSE_DECLARE_STEP(AdagradMultiForward, AdagradCoeffs)
METAFUSE_DECLARE_STEP(AdamaxMultiForward, AdamaxCoeffs)
METAFUSE_DECLARE_STEP(AdadeltaMultiForward, AdadeltaCoeffs)
METAFUSE_DECLARE_STEP(RAdamMultiForward, RAdamCoeffs)
#undef METAFUSE_DECLARE_STEP

}  // namespace metafuse::kernels::cuda
