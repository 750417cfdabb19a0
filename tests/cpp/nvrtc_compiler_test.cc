#include "runtime/cuda/nvrtc_compiler.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "runtime/cuda/cuda_driver.h"

namespace metafuse::runtime {
namespace {

constexpr char kSaxpy[] = R"(
extern "C" __global__ void saxpy(float a, const float* x, float* y, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
)";

TEST(Nvrtc, CompilesSaxpyToPtxWithoutAGpu) {
  auto ptx = CompileCudaToPtx("saxpy.cu", kSaxpy, {.compute_capability = 90});
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  EXPECT_NE(ptx->find(".target sm_90"), std::string::npos);
  EXPECT_NE(ptx->find(".entry saxpy"), std::string::npos);
  EXPECT_NE(ptx->find("fma.rn.f32"), std::string::npos) << *ptx;
}

TEST(Nvrtc, SyntaxErrorCarriesTheCompileLog) {
  auto ptx = CompileCudaToPtx("broken.cu", "__global__ void f( {}");
  ASSERT_FALSE(ptx.ok());
  EXPECT_EQ(ptx.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(ptx.status().message().find("broken.cu"), std::string::npos);
}

TEST(Nvrtc, RejectsImpossibleArchitecture) {
  auto ptx = CompileCudaToPtx("saxpy.cu", kSaxpy, {.compute_capability = 7});
  EXPECT_EQ(ptx.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Nvrtc, VersionIsReported) { EXPECT_NE(NvrtcVersion(), "unknown"); }

// Runs only where a GPU and driver exist (the device machine); elsewhere it
// skips with the driver's own explanation.
TEST(Nvrtc, PtxRunsOnTheGpu) {
  auto driver_or = CudaDriver::Load();
  if (!driver_or.ok()) GTEST_SKIP() << driver_or.status().message();
  const CudaDriver& d = **driver_or;
  auto cc = ComputeCapability(d, 0);
  ASSERT_TRUE(cc.ok()) << cc.status();
  auto ptx = CompileCudaToPtx("saxpy.cu", kSaxpy, {.compute_capability = *cc});
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  CUdevice dev;
  CUcontext ctx;
  CUmodule module;
  CUfunction fn;
  ASSERT_EQ(d.cuDeviceGet(&dev, 0), kCudaSuccess);
  ASSERT_EQ(d.cuDevicePrimaryCtxRetain(&ctx, dev), kCudaSuccess);
  ASSERT_EQ(d.cuCtxSetCurrent(ctx), kCudaSuccess);
  ASSERT_EQ(d.cuModuleLoadData(&module, ptx->c_str()), kCudaSuccess);
  ASSERT_EQ(d.cuModuleGetFunction(&fn, module, "saxpy"), kCudaSuccess);
  long n = 1027;  // not a multiple of the block: the tail must be covered
  std::vector<float> x(n), y(n);
  for (long i = 0; i < n; ++i) { x[i] = i; y[i] = 1; }
  CUdeviceptr dx, dy;
  ASSERT_EQ(d.cuMemAlloc(&dx, n * sizeof(float)), kCudaSuccess);
  ASSERT_EQ(d.cuMemAlloc(&dy, n * sizeof(float)), kCudaSuccess);
  ASSERT_EQ(d.cuMemcpyHtoD(dx, x.data(), n * sizeof(float)), kCudaSuccess);
  ASSERT_EQ(d.cuMemcpyHtoD(dy, y.data(), n * sizeof(float)), kCudaSuccess);
  float a = 2.0f;
  void* args[] = {&a, &dx, &dy, &n};
  ASSERT_EQ(d.cuLaunchKernel(fn, (n + 255) / 256, 1, 1, 256, 1, 1, 0, nullptr,
                             args, nullptr), kCudaSuccess);
  ASSERT_EQ(d.cuCtxSynchronize(), kCudaSuccess);
  ASSERT_EQ(d.cuMemcpyDtoH(y.data(), dy, n * sizeof(float)), kCudaSuccess);
  for (long i = 0; i < n; ++i) ASSERT_FLOAT_EQ(y[i], 2.0f * i + 1.0f) << i;
  d.cuMemFree(dx);
  d.cuMemFree(dy);
  d.cuModuleUnload(module);
}

}  // namespace
}  // namespace metafuse::runtime
