// The nvcc-built Adam kernels against the CPU operator, on a GPU. Without
// one every test skips with the driver's own explanation.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "kernels/cuda/adam_kernels.h"
#include "kernels/cuda/launch_geometry.h"
#include "kernels/optimizers.h"
#include "runtime/cuda_driver.h"

namespace metafuse::kernels::cuda {
namespace {

#define SKIP_WITHOUT_GPU()                                              \
  do {                                                                  \
    auto driver = runtime::CudaDriver::Load();                          \
    if (!driver.ok()) GTEST_SKIP() << driver.status().message();        \
  } while (0)

#define ASSERT_CUDA(expr)                                                  \
  do {                                                                     \
    const cudaError_t err_ = (expr);                                       \
    ASSERT_EQ(err_, cudaSuccess) << #expr << ": " << cudaGetErrorString(err_); \
  } while (0)

// Device copy of a host tensor, freed with the owner.
template <typename T>
struct DeviceBuffer {
  T* ptr = nullptr;
  ~DeviceBuffer() { if (ptr) cudaFree(ptr); }
};

template <typename T>
void RunAgainstCpu(at::ScalarType dtype, const std::vector<int64_t>& sizes,
                   double tol) {
  torch::manual_seed(0);
  std::vector<at::Tensor> g, m, v, p;
  for (int64_t n : sizes) {
    g.push_back(torch::randn({n}, dtype));
    m.push_back(torch::randn({n}, dtype));
    v.push_back(torch::rand({n}, dtype));
    p.push_back(torch::randn({n}, dtype));
  }
  // eps = 1e-3 and eps_root > 0, decoupled weight decay, step 3.
  auto [us, ms, vs] = adam_multi(g, m, v, p, 3, 0.1, 0.9, 0.999, 1e-3, 1e-6,
                                 0.01, true, false);
  const auto coeffs =
      MakeAdamCoeffs<T>(3, 0.1, 0.9, 0.999, 1e-3, 1e-6, 0.01, true, false);

  cudaStream_t stream;
  ASSERT_CUDA(cudaStreamCreate(&stream));
  const size_t K = sizes.size();
  std::vector<DeviceBuffer<T>> bufs(K * 7);
  std::vector<AdamTensor<T>> tensors(K);
  for (size_t k = 0; k < K; ++k) {
    const size_t bytes = sizeof(T) * std::max<int64_t>(sizes[k], 1);
    for (int j = 0; j < 7; ++j) ASSERT_CUDA(cudaMalloc(reinterpret_cast<void**>(&bufs[7 * k + j].ptr), bytes));
    const at::Tensor* host[4] = {&g[k], &p[k], &m[k], &v[k]};
    for (int j = 0; j < 4; ++j) {
      ASSERT_CUDA(cudaMemcpyAsync(bufs[7 * k + j].ptr, host[j]->data_ptr<T>(),
                                  sizeof(T) * sizes[k], cudaMemcpyHostToDevice,
                                  stream));
    }
    tensors[k] = {bufs[7 * k].ptr,     bufs[7 * k + 1].ptr, bufs[7 * k + 2].ptr,
                  bufs[7 * k + 3].ptr, bufs[7 * k + 4].ptr, bufs[7 * k + 5].ptr,
                  bufs[7 * k + 6].ptr, sizes[k]};
  }
  int failed = -1;
  ASSERT_CUDA(AdamMultiForward<T>(coeffs, tensors.data(), static_cast<int>(K),
                                  stream, &failed));
  for (size_t k = 0; k < K; ++k) {
    const at::Tensor* cpu[3] = {&us[k], &ms[k], &vs[k]};
    for (int j = 0; j < 3; ++j) {
      at::Tensor back = torch::full({sizes[k]}, NAN, dtype);
      ASSERT_CUDA(cudaMemcpyAsync(back.data_ptr<T>(), bufs[7 * k + 4 + j].ptr,
                                  sizeof(T) * sizes[k], cudaMemcpyDeviceToHost,
                                  stream));
      ASSERT_CUDA(cudaStreamSynchronize(stream));
      // Every element written (NaN would survive otherwise) and right.
      EXPECT_TRUE(torch::allclose(back, *cpu[j], tol, tol))
          << "tensor " << k << " (n = " << sizes[k] << "), output " << j
          << ", max error " << (back - *cpu[j]).abs().max().item<double>();
    }
  }
  ASSERT_CUDA(cudaStreamDestroy(stream));
}

TEST(CudaAdam, TailSizesMatchCpuFloat32) {
  SKIP_WITHOUT_GPU();
  RunAgainstCpu<float>(torch::kFloat32, {1025, 1026, 1027, 3073, 1, 0, 4096},
                       1e-5);
}

TEST(CudaAdam, ManyTensorsOverSeveralLaunchesFloat64) {
  SKIP_WITHOUT_GPU();
  std::vector<int64_t> sizes;
  for (int k = 0; k < 2 * kTensorsPerLaunch + 5; ++k) sizes.push_back(1024 * (k % 3) + k % 4);
  RunAgainstCpu<double>(torch::kFloat64, sizes, 1e-12);
}

TEST(CudaAdam, LargeTensorUsesTheGridStrideLoop) {
  SKIP_WITHOUT_GPU();
  // More than kMaxBlocks * kBlockSize elements: threads loop.
  RunAgainstCpu<float>(torch::kFloat32, {kMaxBlocks * kBlockSize + 3}, 1e-5);
}

}  // namespace
}  // namespace metafuse::kernels::cuda
