// The multi-tensor launch shared by metafuse's CUDA kernels (nvcc only): a
// batch of up to kTensorsPerLaunch tensors travels by value in the kernel
// parameters, with running offsets that map a global element index to its
// tensor; each launch is parallel over the batch's total element count.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/launch_geometry.h"

namespace metafuse::kernels::cuda {

constexpr int kBatchCapacity = 32;

template <typename Tensor>
struct Batch {
  Tensor tensors[kBatchCapacity];
  int64_t offsets[kBatchCapacity + 1];
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

// Launches kernel(coeffs, batch) once per batch on `stream`, checking every
// launch; returns the first error and, in *failed_launch, its index.
template <typename Coeffs, typename Tensor>
cudaError_t LaunchBatches(void (*kernel)(Coeffs, Batch<Tensor>),
                          const Coeffs& coeffs, const Tensor* tensors,
                          int num_tensors, cudaStream_t stream,
                          int* failed_launch) {
  int launch = 0;
  for (int first = 0; first < num_tensors; first += kBatchCapacity) {
    Batch<Tensor> batch;
    batch.count = 0;
    batch.offsets[0] = 0;
    for (int k = first; k < num_tensors && batch.count < kBatchCapacity;
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

}  // namespace metafuse::kernels::cuda
