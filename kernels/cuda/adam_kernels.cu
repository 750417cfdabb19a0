// Fused Adam/AdamW kernels (see adam_kernels.h).
#include "kernels/cuda/adam_kernels.h"
#include "kernels/cuda/launch_geometry.h"

namespace metafuse::kernels::cuda {
namespace {

// Kernel parameters (passed by value, < 4 KiB): a batch of tensors and the
// running element offsets that map a global index to its tensor.
template <typename Tensor>
struct Batch {
  Tensor tensors[kTensorsPerLaunch];
  int64_t offsets[kTensorsPerLaunch + 1];
  int count;
};

// Calls body(tensor, j) for every element j of every tensor of the batch,
// grid-stride over the batch's total element count.
template <typename Tensor, typename Body>
__device__ __forceinline__ void ForEachElement(const Batch<Tensor>& b,
                                               Body body) {
  const int64_t total = b.offsets[b.count];
  const int64_t stride = Stride(gridDim.x, blockDim.x);
  int k = 0;
  for (int64_t i = FirstIndex(blockIdx.x, blockDim.x, threadIdx.x); i < total;
       i += stride) {
    while (i >= b.offsets[k + 1]) ++k;  // indices only grow: amortized O(1)
    body(b.tensors[k], i - b.offsets[k]);
  }
}

template <typename T>
__global__ void AdamForwardKernel(const AdamCoeffs<T> c,
                                  const Batch<AdamTensor<T>> b) {
  ForEachElement(b, [&](const AdamTensor<T>& t, int64_t j) {
    T u, m, v, r;
    AdamElement<T>(c, t.grad[j], t.param ? t.param[j] : T(0), t.mu[j],
                   t.nu[j], &u, &m, &v, &r);
    t.update[j] = u;
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

// Launches `kernel` once per batch of up to kTensorsPerLaunch tensors on
// `stream`, checking every launch.
template <typename T, typename Tensor>
cudaError_t LaunchBatches(void (*kernel)(AdamCoeffs<T>, Batch<Tensor>),
                          const AdamCoeffs<T>& coeffs, const Tensor* tensors,
                          int num_tensors, cudaStream_t stream,
                          int* failed_launch) {
  int launch = 0;
  for (int first = 0; first < num_tensors; first += kTensorsPerLaunch) {
    Batch<Tensor> batch;
    batch.count = 0;
    batch.offsets[0] = 0;
    for (int k = first; k < num_tensors && batch.count < kTensorsPerLaunch;
         ++k) {
      batch.tensors[batch.count] = tensors[k];
      batch.offsets[batch.count + 1] = batch.offsets[batch.count] + tensors[k].n;
      ++batch.count;
    }
    const Geometry g = ElementwiseGeometry(batch.offsets[batch.count]);
    if (g.grid == 0) continue;  // only empty tensors
    kernel<<<g.grid, g.block, 0, stream>>>(coeffs, batch);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) {
      if (failed_launch) *failed_launch = launch;
      return err;
    }
    ++launch;
  }
  return cudaSuccess;
}

}  // namespace

template <typename T>
cudaError_t AdamMultiForward(const AdamCoeffs<T>& coeffs,
                             const AdamTensor<T>* tensors, int num_tensors,
                             cudaStream_t stream, int* failed_launch) {
  return LaunchBatches<T, AdamTensor<T>>(&AdamForwardKernel<T>, coeffs,
                                         tensors, num_tensors, stream,
                                         failed_launch);
}

template <typename T>
cudaError_t AdamMultiBackward(const AdamCoeffs<T>& coeffs,
                              const AdamGradTensor<T>* tensors,
                              int num_tensors, cudaStream_t stream,
                              int* failed_launch) {
  return LaunchBatches<T, AdamGradTensor<T>>(&AdamBackwardKernel<T>, coeffs,
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
