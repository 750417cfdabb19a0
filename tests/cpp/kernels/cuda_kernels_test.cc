// The nvcc-built kernels against the CPU operators (every optimizer's
// forward, Adam's first-order backward against the CPU autograd path), on a
// GPU. Without one
// every test skips with the driver's own explanation.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <vector>

#include "kernels/cuda/adam_kernels.h"
#include "kernels/cuda/launch_geometry.h"
#include "kernels/cuda/step_kernels.h"
#include "kernels/optimizers.h"
#include "runtime/cuda/cuda_driver.h"

namespace metafuse::kernels::cuda {
namespace {

#define SKIP_WITHOUT_GPU()                                       \
  do {                                                           \
    auto driver = runtime::CudaDriver::Load();                   \
    if (!driver.ok()) GTEST_SKIP() << driver.status().message(); \
  } while (0)

// Device memory of the test, freed at the end; every CUDA call checked.
class Device {
 public:
  Device() { Check(cudaStreamCreate(&stream_), "cudaStreamCreate"); }
  ~Device() {
    for (void* p : owned_) cudaFree(p);
    cudaStreamDestroy(stream_);
  }
  cudaStream_t stream() const { return stream_; }

  template <typename T>
  T* Alloc(int64_t n) {
    void* p = nullptr;
    Check(cudaMalloc(&p, sizeof(T) * std::max<int64_t>(n, 1)), "cudaMalloc");
    owned_.push_back(p);
    return static_cast<T*>(p);
  }
  template <typename T>
  T* Upload(const at::Tensor& t) {
    T* p = Alloc<T>(t.numel());
    Check(cudaMemcpyAsync(p, t.contiguous().data_ptr<T>(), sizeof(T) * t.numel(),
                          cudaMemcpyHostToDevice, stream_),
          "cudaMemcpyAsync H2D");
    Check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    return p;
  }
  template <typename T>
  at::Tensor Download(const T* p, int64_t n, at::ScalarType dtype) {
    at::Tensor t = torch::full({n}, NAN, dtype);  // unwritten stays NaN
    Check(cudaMemcpyAsync(t.data_ptr<T>(), p, sizeof(T) * n,
                          cudaMemcpyDeviceToHost, stream_),
          "cudaMemcpyAsync D2H");
    Check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    return t;
  }
  static void Check(cudaError_t err, const char* what) {
    if (err != cudaSuccess) {
      throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
    }
  }

 private:
  cudaStream_t stream_ = nullptr;
  std::vector<void*> owned_;
};

template <typename T>
void RunAgainstCpu(at::ScalarType dtype, const std::vector<int64_t>& sizes,
                   double tol) {
  torch::manual_seed(0);
  const size_t K = sizes.size();
  std::vector<at::Tensor> g, m, v, p, wu, wm, wv;
  for (int64_t n : sizes) {
    g.push_back(torch::randn({n}, dtype).requires_grad_());
    m.push_back(torch::randn({n}, dtype).requires_grad_());
    v.push_back(torch::rand({n}, dtype).requires_grad_());
    p.push_back(torch::randn({n}, dtype).requires_grad_());
    for (auto* w : {&wu, &wm, &wv}) w->push_back(torch::randn({n}, dtype));
  }
  // eps = 1e-3 and eps_root > 0, decoupled weight decay, step 3.
  auto [us, ms, vs] = adam_multi(g, m, v, p, 3, 0.1, 0.9, 0.999, 1e-3, 1e-6,
                                 0.01, true, false);
  at::Tensor loss = torch::zeros({}, dtype);
  for (size_t k = 0; k < K; ++k) {
    loss = loss + (us[k] * wu[k]).sum() + (ms[k] * wm[k]).sum() +
           (vs[k] * wv[k]).sum();
  }
  std::vector<at::Tensor> leaves;
  for (auto* l : {&g, &m, &v, &p}) leaves.insert(leaves.end(), l->begin(), l->end());
  const auto cpu_grads = torch::autograd::grad({loss}, leaves);
  const auto coeffs =
      MakeAdamCoeffs<T>(3, 0.1, 0.9, 0.999, 1e-3, 1e-6, 0.01, true, false);

  Device dev;
  std::vector<AdamTensor<T>> fwd(K);
  std::vector<AdamGradTensor<T>> bwd(K);
  for (size_t k = 0; k < K; ++k) {
    const int64_t n = sizes[k];
    auto& f = fwd[k];
    f = {dev.Upload<T>(g[k].detach()), dev.Upload<T>(p[k].detach()),
         dev.Upload<T>(m[k].detach()), dev.Upload<T>(v[k].detach()),
         dev.Alloc<T>(n), dev.Alloc<T>(n), dev.Alloc<T>(n), dev.Alloc<T>(n), n};
    bwd[k] = {f.grad, f.param, f.mu_out, f.root, dev.Upload<T>(wu[k]),
              dev.Upload<T>(wm[k]), dev.Upload<T>(wv[k]), dev.Alloc<T>(n),
              dev.Alloc<T>(n), dev.Alloc<T>(n), dev.Alloc<T>(n), n};
  }
  int failed = -1;
  ASSERT_EQ(AdamMultiForward<T>(coeffs, fwd.data(), K, dev.stream(), &failed),
            cudaSuccess) << "launch " << failed;
  ASSERT_EQ(AdamMultiBackward<T>(coeffs, bwd.data(), K, dev.stream(), &failed),
            cudaSuccess) << "launch " << failed;
  for (size_t k = 0; k < K; ++k) {
    const int64_t n = sizes[k];
    const std::pair<const T*, at::Tensor> checks[] = {
        {fwd[k].update, us[k]},
        {fwd[k].mu_out, ms[k]},
        {fwd[k].nu_out, vs[k]},
        {bwd[k].grad_grad, cpu_grads[k]},
        {bwd[k].grad_mu, cpu_grads[K + k]},
        {bwd[k].grad_nu, cpu_grads[2 * K + k]},
        {bwd[k].grad_param, cpu_grads[3 * K + k]}};
    int j = 0;
    for (const auto& [dev_ptr, cpu] : checks) {
      at::Tensor back = dev.Download(dev_ptr, n, dtype);
      // Every element written (NaN would survive otherwise) and right.
      EXPECT_TRUE(torch::allclose(back, cpu.detach(), tol, tol))
          << "tensor " << k << " (n = " << n << "), check " << j
          << ", max error " << (back - cpu.detach()).abs().max().template item<double>();
      ++j;
    }
  }
}

TEST(CudaAdam, TailSizesMatchCpuFloat32) {
  SKIP_WITHOUT_GPU();
  RunAgainstCpu<float>(torch::kFloat32, {1025, 1026, 1027, 3073, 1, 0, 4096},
                       1e-4);
}

TEST(CudaAdam, ManyTensorsOverSeveralLaunchesFloat64) {
  SKIP_WITHOUT_GPU();
  std::vector<int64_t> sizes;
  for (int k = 0; k < 2 * kTensorsPerLaunch + 5; ++k) {
    sizes.push_back(1024 * (k % 3) + k % 4);
  }
  RunAgainstCpu<double>(torch::kFloat64, sizes, 1e-12);
}

TEST(CudaAdam, LargeTensorUsesTheGridStrideLoop) {
  SKIP_WITHOUT_GPU();
  // More than kMaxBlocks * kBlockSize elements: threads loop.
  RunAgainstCpu<float>(torch::kFloat32, {kMaxBlocks * kBlockSize + 3}, 1e-4);
}

// The other optimizers' forward: state slots as in step_kernels.h, compared
// with the CPU op on tensors whose sizes end in 1024k + 1..3.
using CpuStep = std::function<std::vector<at::Tensor>(
    const at::Tensor& g, const std::vector<at::Tensor>& s, const at::Tensor& p)>;

template <typename T, typename Coeffs>
void CheckStep(cudaError_t (*gpu)(const Coeffs&, const StepTensor<T>*, int,
                                  cudaStream_t, int*),
               const Coeffs& coeffs, const std::vector<bool>& slots,
               const CpuStep& cpu, at::ScalarType dtype, double tol) {
  torch::manual_seed(1);
  const std::vector<int64_t> sizes = {1025, 2051, 3, 0, 1};
  Device dev;
  std::vector<StepTensor<T>> tensors(sizes.size());
  std::vector<std::vector<at::Tensor>> expected;
  for (size_t k = 0; k < sizes.size(); ++k) {
    const int64_t n = sizes[k];
    at::Tensor g = torch::randn({n}, dtype), p = torch::randn({n}, dtype);
    std::vector<at::Tensor> s(3);
    for (int j = 0; j < 3; ++j) {
      // Slot 0 dominates slot 1 squared (centered RMSProp stays defined).
      if (slots[j]) s[j] = j == 1 ? torch::rand({n}, dtype) * 0.1 + 0.1
                                  : torch::rand({n}, dtype) + 1.0;
    }
    expected.push_back(cpu(g, s, p));
    auto& t = tensors[k];
    t.grad = dev.Upload<T>(g);
    t.param = dev.Upload<T>(p);
    t.update = dev.Alloc<T>(n);
    for (int j = 0; j < 3; ++j) {
      if (!slots[j]) continue;
      t.state[j] = dev.Upload<T>(s[j]);
      t.state_out[j] = dev.Alloc<T>(n);
    }
    t.n = n;
  }
  int failed = -1;
  ASSERT_EQ(gpu(coeffs, tensors.data(), static_cast<int>(tensors.size()),
                dev.stream(), &failed),
            cudaSuccess)
      << "launch " << failed;
  for (size_t k = 0; k < sizes.size(); ++k) {
    const T* outs[4] = {tensors[k].update, tensors[k].state_out[0],
                        tensors[k].state_out[1], tensors[k].state_out[2]};
    for (int j = 0; j < 4; ++j) {
      if (j > 0 && !slots[j - 1]) continue;
      at::Tensor back = dev.Download(outs[j], sizes[k], dtype);
      EXPECT_TRUE(torch::allclose(back, expected[k][j], tol, tol))
          << "tensor " << k << " (n = " << sizes[k] << "), output " << j;
    }
  }
}

std::vector<at::Tensor> Vec(std::initializer_list<at::Tensor> l) { return l; }

TEST(CudaSteps, EveryOptimizerMatchesCpu) {
  SKIP_WITHOUT_GPU();
  const auto f64 = torch::kFloat64;
  CheckStep<double>(&SgdMultiForward<double>,
                    MakeSgdCoeffs<double>(2, 0.1, 0.9, 0.0, true, 0.01, false),
                    {true, false, false},
                    [](auto g, auto s, auto p) {
                      auto [u, b] = sgd(g, s[0], p, 2, 0.1, 0.9, 0.0, true, 0.01, false);
                      return Vec({u, b});
                    },
                    f64, 1e-12);
  CheckStep<double>(&RmsPropMultiForward<double>,
                    MakeRmsPropCoeffs<double>(0.01, 0.9, 1e-3, 1e-6, 0.1, 0.5, true, true),
                    {true, true, true},
                    [](auto g, auto s, auto p) {
                      auto [u, a, b, c] = rmsprop(g, s[0], s[1], s[2], p, 0.01, 0.9, 1e-3,
                                                  1e-6, 0.1, 0.5, true, true);
                      return Vec({u, a, b, c});
                    },
                    f64, 1e-12);
  CheckStep<double>(&AdagradMultiForward<double>,
                    MakeAdagradCoeffs<double>(3, 0.1, 0.1, 0.1, 1e-3, 1e-6, false),
                    {true, false, false},
                    [](auto g, auto s, auto p) {
                      auto [u, a] = adagrad(g, s[0], p, 3, 0.1, 0.1, 0.1, 1e-3, 1e-6, false);
                      return Vec({u, a});
                    },
                    f64, 1e-12);
  CheckStep<double>(&AdamaxMultiForward<double>,
                    MakeAdamaxCoeffs<double>(4, 0.002, 0.9, 0.999, 1e-3, 0.1, true),
                    {true, true, false},
                    [](auto g, auto s, auto p) {
                      auto [u, a, b] = adamax(g, s[0], s[1], p, 4, 0.002, 0.9, 0.999,
                                              1e-3, 0.1, true);
                      return Vec({u, a, b});
                    },
                    f64, 1e-12);
  CheckStep<double>(&AdadeltaMultiForward<double>,
                    MakeAdadeltaCoeffs<double>(0.5, 0.8, 1e-3, 0.1, false),
                    {true, true, false},
                    [](auto g, auto s, auto p) {
                      auto [u, a, b] = adadelta(g, s[0], s[1], p, 0.5, 0.8, 1e-3, 0.1, false);
                      return Vec({u, a, b});
                    },
                    f64, 1e-12);
  for (int64_t count : {2, 10}) {  // before and after rectification
    CheckStep<double>(&RAdamMultiForward<double>,
                      MakeRAdamCoeffs<double>(count, 1e-3, 0.9, 0.999, 1e-3, 1e-6,
                                              0.1, true, false),
                      {true, true, false},
                      [count](auto g, auto s, auto p) {
                        auto [u, a, b] = radam(g, s[0], s[1], p, count, 1e-3, 0.9,
                                               0.999, 1e-3, 1e-6, 0.1, true, false);
                        return Vec({u, a, b});
                      },
                      f64, 1e-12);
  }
  // float32 once, with the plain (no momentum) SGD slot layout.
  CheckStep<float>(&SgdMultiForward<float>,
                   MakeSgdCoeffs<float>(1, 0.1, 0.0, 0.0, false, 0.0, false),
                   {false, false, false},
                   [](auto g, auto s, auto p) {
                     auto [u, b] = sgd(g, c10::nullopt, c10::nullopt, 1, 0.1, 0.0,
                                       0.0, false, 0.0, false);
                     return Vec({u, b});
                   },
                   torch::kFloat32, 1e-6);
}

}  // namespace
}  // namespace metafuse::kernels::cuda
