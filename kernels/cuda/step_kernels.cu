// Fused forward steps on CUDA (see step_kernels.h): one generic kernel, an
// element function per optimizer mapping its state slots.
#include "kernels/cuda/batch_launch.cuh"
#include "kernels/cuda/step_kernels.h"

namespace metafuse::kernels::cuda {
namespace {

template <typename T>
__device__ __forceinline__ T Load(const T* p, int64_t j) {
  return p ? p[j] : T(0);
}

template <typename T>
__device__ __forceinline__ void Store(T* p, int64_t j, T v) {
  if (p) p[j] = v;
}

// Per optimizer: (coeffs, g, p, s0, s1, s2) -> update, o0, o1, o2.
template <typename T>
__device__ void StepElement(const SgdCoeffs<T>& c, T g, T p, T s0, T, T,
                            T* u, T* o0, T*, T*) {
  SgdElement<T>(c, g, p, s0, u, o0);
}
template <typename T>
__device__ void StepElement(const RmsPropCoeffs<T>& c, T g, T p, T s0, T s1,
                            T s2, T* u, T* o0, T* o1, T* o2) {
  T r;
  RmsPropElement<T>(c, g, p, s0, s1, s2, u, o0, o1, o2, &r);
}
template <typename T>
__device__ void StepElement(const AdagradCoeffs<T>& c, T g, T p, T s0, T, T,
                            T* u, T* o0, T*, T*) {
  T r;
  AdagradElement<T>(c, g, p, s0, u, o0, &r);
}
template <typename T>
__device__ void StepElement(const AdamaxCoeffs<T>& c, T g, T p, T s0, T s1,
                            T, T* u, T* o0, T* o1, T*) {
  AdamaxElement<T>(c, g, p, s0, s1, u, o0, o1);
}
template <typename T>
__device__ void StepElement(const AdadeltaCoeffs<T>& c, T g, T p, T s0, T s1,
                            T, T* u, T* o0, T* o1, T*) {
  T r1, r2;
  AdadeltaElement<T>(c, g, p, s0, s1, u, o0, o1, &r1, &r2);
}
template <typename T>
__device__ void StepElement(const RAdamCoeffs<T>& c, T g, T p, T s0, T s1, T,
                            T* u, T* o0, T* o1, T*) {
  T r;
  RAdamElement<T>(c, g, p, s0, s1, u, o0, o1, &r);
}

template <typename Coeffs, typename T>
__global__ void StepKernel(const Coeffs c, const Batch<StepTensor<T>> b) {
  ForEachElement(b, [&](const StepTensor<T>& t, int64_t j) {
    T u, o0 = 0, o1 = 0, o2 = 0;
    StepElement<T>(c, t.grad[j], Load(t.param, j), Load(t.state[0], j),
                   Load(t.state[1], j), Load(t.state[2], j), &u, &o0, &o1,
                   &o2);
    t.update[j] = t.accumulate ? t.update[j] + u : u;
    Store(t.state_out[0], j, o0);
    Store(t.state_out[1], j, o1);
    Store(t.state_out[2], j, o2);
  });
}

}  // namespace

#define METAFUSE_DEFINE_STEP(NAME, COEFFS)                                    \
  template <typename T>                                                       \
  cudaError_t NAME(const COEFFS<T>& coeffs, const StepTensor<T>* tensors,     \
                   int num_tensors, cudaStream_t stream, int* failed_launch) { \
    return LaunchBatches<COEFFS<T>, StepTensor<T>>(                           \
        &StepKernel<COEFFS<T>, T>, coeffs, tensors, num_tensors, stream,      \
        failed_launch);                                                       \
  }                                                                           \
  template cudaError_t NAME<float>(const COEFFS<float>&,                      \
                                   const StepTensor<float>*, int,             \
                                   cudaStream_t, int*);                       \
  template cudaError_t NAME<double>(const COEFFS<double>&,                    \
                                    const StepTensor<double>*, int,           \
                                    cudaStream_t, int*);
METAFUSE_DEFINE_STEP(SgdMultiForward, SgdCoeffs)
METAFUSE_DEFINE_STEP(RmsPropMultiForward, RmsPropCoeffs)
METAFUSE_DEFINE_STEP(AdagradMultiForward, AdagradCoeffs)
METAFUSE_DEFINE_STEP(AdamaxMultiForward, AdamaxCoeffs)
METAFUSE_DEFINE_STEP(AdadeltaMultiForward, AdadeltaCoeffs)
METAFUSE_DEFINE_STEP(RAdamMultiForward, RAdamCoeffs)
#undef METAFUSE_DEFINE_STEP

}  // namespace metafuse::kernels::cuda
