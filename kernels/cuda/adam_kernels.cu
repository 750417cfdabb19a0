// Fused Adam/AdamW forward kernels (see adam_kernels.h).
#include "kernels/cuda/adam_kernels.h"
#include "kernels/cuda/launch_geometry.h"

namespace metafuse::kernels::cuda {
namespace {

// Kernel parameters (passed by value, < 4 KiB): a batch of tensors and the
// running element offsets that map a global index to its tensor.
template <typename T>
struct AdamBatch {
  AdamTensor<T> tensors[kTensorsPerLaunch];
  int64_t offsets[kTensorsPerLaunch + 1];
  int count;
};

template <typename T>
__global__ void AdamMultiKernel(const AdamCoeffs<T> c, const AdamBatch<T> b) {
  const int64_t total = b.offsets[b.count];
  const int64_t stride = Stride(gridDim.x, blockDim.x);
  int k = 0;
  for (int64_t i = FirstIndex(blockIdx.x, blockDim.x, threadIdx.x); i < total;
       i += stride) {
    while (i >= b.offsets[k + 1]) ++k;  // indices only grow: amortized O(1)
    const AdamTensor<T>& t = b.tensors[k];
    const int64_t j = i - b.offsets[k];
    T u, m, v, r;
    AdamElement<T>(c, t.grad[j], t.param ? t.param[j] : T(0), t.mu[j],
                   t.nu[j], &u, &m, &v, &r);
    t.update[j] = u;
    t.mu_out[j] = m;
    t.nu_out[j] = v;
  }
}

}  // namespace

template <typename T>
cudaError_t AdamMultiForward(const AdamCoeffs<T>& coeffs,
                             const AdamTensor<T>* tensors, int num_tensors,
                             cudaStream_t stream, int* failed_launch) {
  int launch = 0;
  for (int first = 0; first < num_tensors; first += kTensorsPerLaunch) {
    AdamBatch<T> batch;
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
    AdamMultiKernel<T><<<g.grid, g.block, 0, stream>>>(coeffs, batch);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) {
      if (failed_launch) *failed_launch = launch;
      return err;
    }
    ++launch;
  }
  return cudaSuccess;
}

template cudaError_t AdamMultiForward<float>(const AdamCoeffs<float>&,
                                             const AdamTensor<float>*, int,
                                             cudaStream_t, int*);
template cudaError_t AdamMultiForward<double>(const AdamCoeffs<double>&,
                                              const AdamTensor<double>*, int,
                                              cudaStream_t, int*);

}  // namespace metafuse::kernels::cuda
