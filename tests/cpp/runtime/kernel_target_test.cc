// The CUDA decisions of the runtime without a GPU: which code of a fused
// kernel runs for a device (KernelTargetFor), where the compiler may fuse
// (CanFuseOn), which devices compiled programs take (CheckProgramDevice),
// and which driver stream a torch stream is (StreamHandleFor).
#include <gtest/gtest.h>

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "runtime/cuda/cuda_stream.h"
#include "runtime/executor/kernel_target.h"

namespace metafuse::runtime {
namespace {

const c10::Device kCpu(c10::kCPU);
const c10::Device kCuda0(c10::kCUDA, 0);
const c10::Device kMeta(c10::kMeta);

KernelCode HostCode() {
  KernelCode k;
  k.name = "fused_host";
  k.llvm_ir = "define void @mf_fused_host() { ret void }";
  return k;
}
KernelCode CudaCode() {
  KernelCode k;
  k.name = "fused_cuda";
  k.cuda_source = "extern \"C\" __global__ void mf_fused_cuda(long long n) {}";
  return k;
}
KernelBackends With(bool nvrtc) {
  KernelBackends b;
  b.nvrtc = nvrtc;
  return b;
}

TEST(KernelTarget, EachDevicePicksItsCode) {
  auto host = KernelTargetFor(HostCode(), kCpu, With(false));
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_EQ(*host, KernelTarget::kHost);
  auto cuda = KernelTargetFor(CudaCode(), kCuda0, With(true));
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  EXPECT_EQ(*cuda, KernelTarget::kCuda);
}

std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST(KernelTarget, ProgramForTheOtherDeviceSaysWhatToDo) {
  auto on_cpu = KernelTargetFor(CudaCode(), kCpu, With(true));
  ASSERT_FALSE(on_cpu.ok());
  EXPECT_NE(Message(on_cpu.status()).find("fused_cuda on cpu"), std::string::npos)
      << on_cpu.status();
  EXPECT_NE(Message(on_cpu.status()).find("compiled for CUDA tensors"), std::string::npos);
  auto on_cuda = KernelTargetFor(HostCode(), kCuda0, With(true));
  ASSERT_FALSE(on_cuda.ok());
  EXPECT_NE(Message(on_cuda.status()).find("fused_host on cuda:0"), std::string::npos)
      << on_cuda.status();
  EXPECT_NE(Message(on_cuda.status()).find("compile it again for CUDA inputs"),
            std::string::npos);
}

TEST(KernelTarget, CudaWithoutNvrtcNamesTheRebuild) {
  auto r = KernelTargetFor(CudaCode(), kCuda0, With(false));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(Message(r.status()).find("no NVRTC"), std::string::npos) << r.status();
  EXPECT_NE(Message(r.status()).find("CUDA toolkit"), std::string::npos);
}

TEST(KernelTarget, OtherDevicesAreRefusedByName) {
  auto r = KernelTargetFor(HostCode(), kMeta, With(true));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(Message(r.status()).find("on meta"), std::string::npos) << r.status();
  EXPECT_NE(Message(r.status()).find(".to('cuda')"), std::string::npos);
  const absl::Status program = CheckProgramDevice(kMeta);
  ASSERT_FALSE(program.ok());
  EXPECT_NE(Message(program).find("tensor on meta"), std::string::npos) << program;
  EXPECT_NE(Message(program).find("call the function eagerly"), std::string::npos);
  EXPECT_TRUE(CheckProgramDevice(kCpu).ok());
  EXPECT_TRUE(CheckProgramDevice(kCuda0).ok());
}

TEST(KernelTarget, FusionFollowsTheBackends) {
  EXPECT_TRUE(CanFuseOn(kCpu, With(false)));
  EXPECT_TRUE(CanFuseOn(kCuda0, With(true)));
  EXPECT_FALSE(CanFuseOn(kCuda0, With(false)));
  EXPECT_FALSE(CanFuseOn(kMeta, With(true)));
}

TEST(KernelTarget, ThisBuildHasNvrtcWhereTheToolkitWas) {
  // The Bazel build defines METAFUSE_HAS_NVRTC exactly where it links NVRTC
  // (runtime/BUILD); the test binary is built the same way.
  EXPECT_EQ(BuiltKernelBackends().nvrtc, METAFUSE_TEST_EXPECTS_NVRTC != 0);
  EXPECT_TRUE(BuiltKernelBackends().host);
}

TEST(CudaStream, DefaultStreamIsTheLegacyStream) {
  const c10::Stream default_stream(c10::Stream::DEFAULT, kCuda0);
  auto handle = StreamHandleFor(default_stream, std::nullopt);
  ASSERT_TRUE(handle.ok()) << handle.status();
  EXPECT_EQ(*handle, nullptr);
}

TEST(CudaStream, NativeHandleIsUsedWhenTorchGivesOne) {
  const c10::Stream stream(c10::Stream::UNSAFE, kCuda0, 7);
  int marker = 0;
  auto handle = StreamHandleFor(stream, static_cast<void*>(&marker));
  ASSERT_TRUE(handle.ok()) << handle.status();
  EXPECT_EQ(static_cast<void*>(*handle), static_cast<void*>(&marker));
}

TEST(CudaStream, UnreadableNonDefaultStreamIsAnError) {
  const c10::Stream stream(c10::Stream::UNSAFE, kCuda0, 7);
  auto handle = StreamHandleFor(stream, std::nullopt);
  ASSERT_FALSE(handle.ok());
  EXPECT_NE(Message(handle.status()).find("cuda:0 is stream id 7"), std::string::npos)
      << handle.status();
  EXPECT_NE(Message(handle.status()).find("default stream"), std::string::npos);
  auto cpu = StreamHandleFor(c10::Stream(c10::Stream::DEFAULT, kCpu), std::nullopt);
  EXPECT_FALSE(cpu.ok());
}

TEST(CudaStream, CurrentStreamOfThisProcess) {
  EXPECT_FALSE(CurrentCudaStream(kCpu).ok());
  auto current = CurrentCudaStream(kCuda0);
  if (!c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA)) {
    // A CPU torch queues nothing on the device: the legacy default stream.
    ASSERT_TRUE(current.ok()) << current.status();
    EXPECT_EQ(*current, nullptr);
  }
  // A CUDA torch without a GPU: a Status that says so, not an exception.
}

}  // namespace
}  // namespace metafuse::runtime
