// Fused Adam/AdamW kernels (see adam_kernels.h).
#include "kernels/cuda/adam_kernels.h"
#include "kernels/cuda/batch_launch.cuh"

namespace metafuse::kernels::cuda {
namespace {

template <typename T>
__global__ void AdamForwardKernel(const AdamCoeffs<T> c,
                                  const Batch<AdamTensor<T>> b) {
  ForEachElement(b, [&](const AdamTensor<T>& t, int64_t j) {
    T u, m, v, r;
    AdamElement<T>(c, t.grad[j], t.param ? t.param[j] : T(0), t.mu[j],
                   t.nu[j], &u, &m, &v, &r);
    t.update[j] = t.accumulate ? t.update[j] + u : u;
    t.mu_out[j] = m;
    t.nu_out[j] = v;
    if (t.root) t.root[j] = r;
  });
}

template <typename T>
__global__ void AdamBackwardKernel(const AdamCoeffs<T> c,
                                   const Batch<AdamGradTensor<T>> b) {
  ForEachElement(b, [&](const AdamGradTensor<T>& t, int64_t j) {
    T gg, gp, gm, gn;
    AdamBackwardElement<T>(c, t.grad[j], t.param ? t.param[j] : T(0),
                           t.mu_new[j], t.root[j], t.grad_update[j],
                           t.grad_mu_new[j], t.grad_nu_new[j], &gg, &gp, &gm,
                           &gn);
    t.grad_grad[j] = gg;
    if (t.grad_param) t.grad_param[j] = gp;
    t.grad_mu[j] = gm;
    t.grad_nu[j] = gn;
  });
}

}  // namespace

template <typename T>
cudaError_t AdamMultiForward(const AdamCoeffs<T>& coeffs,
                             const AdamTensor<T>* tensors, int num_tensors,
                             cudaStream_t stream, int* failed_launch) {
  return LaunchBatches<AdamCoeffs<T>, AdamTensor<T>>(&AdamForwardKernel<T>, coeffs,
                                         tensors, num_tensors, stream,
                                         failed_launch);
}

template <typename T>
cudaError_t AdamMultiBackward(const AdamCoeffs<T>& coeffs,
                              const AdamGradTensor<T>* tensors,
                              int num_tensors, cudaStream_t stream,
                              int* failed_launch) {
  return LaunchBatches<AdamCoeffs<T>, AdamGradTensor<T>>(&AdamBackwardKernel<T>, coeffs,
                                             tensors, num_tensors, stream,
                                             failed_launch);
}

#define METAFUSE_INSTANTIATE(T)                                              \
  template cudaError_t AdamMultiForward<T>(const AdamCoeffs<T>&,             \
                                           const AdamTensor<T>*, int,        \
                                           cudaStream_t, int*);              \
  template cudaError_t AdamMultiBackward<T>(const AdamCoeffs<T>&,            \
                                            const AdamGradTensor<T>*, int,   \
                                            cudaStream_t, int*);
METAFUSE_INSTANTIATE(float)
METAFUSE_INSTANTIATE(double)
#undef METAFUSE_INSTANTIATE

}  // namespace metafuse::kernels::cuda
