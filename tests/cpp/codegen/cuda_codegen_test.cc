// The CUDA printer without a GPU: the printed kernels (the shared test
// kernels and random ones) compile to PTX with NVRTC, and, compiled as host
// C++ with tests/cpp/codegen/cuda_host_shim.h and run over a whole grid on the
// CPU, match kir::Interpret bit for bit. The PTX cache; loading and launching
// only where a GPU exists (skipped here with the driver's reason).
#include "compiler/codegen/cuda_printer.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "runtime/cuda/cuda_fused_kernel.h"
#include "runtime/cuda/cuda_kernel.h"
#include "runtime/cuda/cuda_ptx.h"
#include "runtime/cuda/nvrtc_compiler.h"
#include "tests/cpp/codegen/cuda_host_run.h"
#include "tests/cpp/codegen/random_kernels.h"
#include "tests/cpp/codegen/test_kernels.h"

namespace metafuse::codegen {
namespace {

using kir::DType;
using testing::Buffers;
using testing::MaxUlp;

constexpr int kRandomKernels = 150;

std::vector<kir::Kernel> TestKernels() {
  return {testing::AllOpsKernel(DType::kF32),     testing::AllOpsKernel(DType::kF64),
          testing::AdamKernel(DType::kF32),       testing::AdamKernel(DType::kF64),
          testing::PassThroughKernel(DType::kF32), testing::PassThroughKernel(DType::kF64)};
}

std::vector<kir::Kernel> AllKernels() {
  std::vector<kir::Kernel> all = TestKernels();
  for (uint32_t seed = 1; seed <= kRandomKernels; ++seed) {
    all.push_back(testing::RandomKernel(seed));
  }
  return all;
}

runtime::CudaKernelSource SourceFor(const kir::Kernel& k) {
  auto source = PrintCudaSource(k);
  EXPECT_TRUE(source.ok()) << source.status();
  return {CudaKernelSymbol(k), kir::Print(k), source.value_or(""), kCudaPrinterVersion};
}

TEST(CudaCodegen, PrintsAGridStrideGlobalKernel) {
  auto src = PrintCudaSource(testing::AdamKernel());
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_HAS(*src, "extern \"C\" __global__ void mf_adam_f32(long long n,");
  EXPECT_HAS(*src, "const float* __restrict__ in0  /* p [i] */");
  EXPECT_HAS(*src, "float* __restrict__ out2  /* p_out */");
  EXPECT_HAS(*src, "double scalar3  /* eps */) {");
  EXPECT_HAS(*src, "const float s0 = static_cast<float>(scalar0);");
  EXPECT_HAS(*src, "blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;");
  EXPECT_HAS(*src, "static_cast<long long>(gridDim.x) * blockDim.x;");
  EXPECT_HAS(*src, "for (long long i = start; i < n; i += stride) {");
  EXPECT_HAS(*src, "sqrtf(v");
  EXPECT_HAS(*src, "out2[i] = v");
  // The prelude defines metafuse's exp for both dtypes.
  EXPECT_HAS(*src, "static __device__ __forceinline__ float mf_exp_f32(float x)");
  EXPECT_HAS(*src, "static __device__ __forceinline__ double mf_exp_f64(double x)");

  auto all = PrintCudaKernel(testing::AllOpsKernel(DType::kF64));
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_HAS(*all, " = log(v");
  EXPECT_HAS(*all, " = mf_exp_f64(v");
  EXPECT_HAS(*all, "in2[i % 7]");
  EXPECT_HAS(*all, "in3[i / 5]");
  EXPECT_HAS(*all, "const double b4 = in4[0];");
  EXPECT_EQ(all->find("logf("), std::string::npos);
  auto pass = PrintCudaKernel(testing::PassThroughKernel(DType::kF32));
  ASSERT_TRUE(pass.ok()) << pass.status();
  EXPECT_HAS(*pass, "__int_as_float(0x7fc00000)");
  EXPECT_HAS(*pass, "-__int_as_float(0x7f800000)");

  kir::Kernel bad = testing::AdamKernel();
  bad.nodes[4].index = 9;
  auto error = PrintCudaKernel(bad);
  ASSERT_FALSE(error.ok());
  EXPECT_EQ(error.status().code(), absl::StatusCode::kInvalidArgument);
}

// (a) Every test kernel and kRandomKernels random ones compile with NVRTC,
// for two architectures. (Their PTX has FMAs: CUDA's own logf, tanhf, powf
// use them inside; the kernels' arithmetic does not, see below.)
TEST(CudaCodegen, NvrtcCompilesEveryKernel) {
  const std::vector<kir::Kernel> kernels = AllKernels();
  const std::string source = testing::CombinedCudaSource(kernels);
  for (int cc : {80, 90}) {
    runtime::NvrtcOptions options;
    options.compute_capability = cc;
    options.extra_flags = runtime::KernelNvrtcFlags();
    auto ptx = runtime::CompileCudaToPtx("all_kernels.cu", source, options);
    ASSERT_TRUE(ptx.ok()) << ptx.status();
    EXPECT_HAS(*ptx, absl::StrCat(".target sm_", cc));
    for (const kir::Kernel& k : kernels) {
      EXPECT_NE(ptx->find(absl::StrCat(".entry ", CudaKernelSymbol(k), "(")), std::string::npos)
          << k.name;
    }
  }
}

// Without --fmad=false NVRTC contracts (exp's Horner steps, Adam's updates):
// the flag is what keeps the interpreter's roundings.
TEST(CudaCodegen, DefaultNvrtcFlagsWouldContractIntoFma) {
  kir::KernelBuilder b("silu_f64");
  const int x = b.Input("x", DType::kF64);
  b.Output("y", b.Mul(x, b.Sigmoid(x)));
  for (const kir::Kernel& k : {testing::AdamKernel(), *b.Build()}) {
    auto src = PrintCudaSource(k);
    ASSERT_TRUE(src.ok());
    auto contracted = runtime::CompileCudaToPtx("k.cu", *src, {.compute_capability = 80});
    ASSERT_TRUE(contracted.ok()) << contracted.status();
    EXPECT_HAS(*contracted, "fma.rn.f");
    auto exact = runtime::CompileKernelPtx(SourceFor(k), 80);
    ASSERT_TRUE(exact.ok()) << exact.status();
    EXPECT_EQ(exact->find("fma.rn"), std::string::npos) << k.name;
    // IEEE division (1 / x as the correctly rounded reciprocal).
    EXPECT_TRUE(exact->find("div.rn.f") != std::string::npos ||
                exact->find("rcp.rn.f") != std::string::npos) << *exact;
  }
}

// (b) The printed CUDA, compiled as host C++ with the shim header and run over
// grids smaller and larger than n, matches the interpreter exactly (0 ulp):
// on the host, the shim's log/pow are the interpreter's libm, and
// -ffp-contract=off matches --fmad=false.
TEST(CudaCodegen, HostShimRunOfTheGridMatchesInterpreter) {
  testing::ExpectHostShimGridRunsMatchInterpreter(AllKernels());
}

TEST(CudaCodegen, PtxCacheHitsAreVerified) {
  const std::string dir = testing::MakeTempDir("mf_cuda_cache");
  ASSERT_FALSE(dir.empty());
  auto cache = runtime::KernelCache::Open(dir);
  ASSERT_TRUE(cache.ok()) << cache.status();
  const runtime::CudaKernelSource adam = SourceFor(testing::AdamKernel());
  bool built = false;
  auto first = runtime::CompileKernelPtx(adam, 90, cache->get(), &built);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(built);
  EXPECT_TRUE(runtime::VerifyPtx(*first, adam.symbol, 90).ok());
  auto again = runtime::CompileKernelPtx(adam, 90, cache->get(), &built);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(built);
  EXPECT_EQ(*again, *first);
  // A new cache object on the same directory: a disk hit.
  auto reopened = runtime::KernelCache::Open(dir);
  ASSERT_TRUE(reopened.ok());
  auto disk = runtime::CompileKernelPtx(adam, 90, reopened->get(), &built);
  ASSERT_TRUE(disk.ok());
  EXPECT_FALSE(built);
  EXPECT_EQ((*reopened)->stats().disk_hits, 1);
  // Another architecture is another key.
  auto sm80 = runtime::CompileKernelPtx(adam, 80, reopened->get(), &built);
  ASSERT_TRUE(sm80.ok());
  EXPECT_TRUE(built);
  EXPECT_HAS(*sm80, ".target sm_80");
  // The key: IR, architecture and flags, printer and NVRTC versions.
  const runtime::KernelKey key = runtime::PtxCacheKey(adam, 90);
  EXPECT_EQ(key.ir, adam.kernel_ir);
  EXPECT_EQ(key.target, "compute_90 --fmad=false");
  EXPECT_EQ(key.versions, absl::StrCat(kCudaPrinterVersion, " / nvrtc ", runtime::NvrtcVersion()));
  // An entry that is not this kernel's PTX is compiled again and replaced.
  ASSERT_TRUE((*reopened)->Store(key, "not ptx").ok());
  auto fixed = runtime::CompileKernelPtx(adam, 90, reopened->get(), &built);
  ASSERT_TRUE(fixed.ok());
  EXPECT_TRUE(built);
  EXPECT_EQ(*fixed, *first);
  EXPECT_EQ((*reopened)->Lookup(key).value_or(""), *first);
  std::filesystem::remove_all(dir);
}

TEST(CudaCodegen, CompileErrorsCarryTheLog) {
  runtime::CudaKernelSource broken = SourceFor(testing::AdamKernel());
  broken.source += "\nextern \"C\" __global__ void oops() { undeclared_name = 1; }\n";
  auto ptx = runtime::CompileKernelPtx(broken, 90);
  ASSERT_FALSE(ptx.ok());
  EXPECT_HAS(ptx.status().message(), "undeclared_name");
  EXPECT_HAS(ptx.status().message(), "mf_adam_f32.cu");
  auto empty = runtime::CompileKernelPtx(runtime::CudaKernelSource{}, 90);
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(runtime::VerifyPtx("// nothing", "mf_adam_f32", 90).ok());
}

TEST(CudaCodegen, GridBlocks) {
  EXPECT_EQ(runtime::GridBlocks(0, 256, 1024).value(), 1u);
  EXPECT_EQ(runtime::GridBlocks(256, 256, 1024).value(), 1u);
  EXPECT_EQ(runtime::GridBlocks(257, 256, 1024).value(), 2u);
  EXPECT_EQ(runtime::GridBlocks(int64_t{1} << 40, 256, 1024).value(), 1024u);
  EXPECT_FALSE(runtime::GridBlocks(10, 0, 1024).ok());
  EXPECT_FALSE(runtime::GridBlocks(-1, 256, 1024).ok());
}

// Without a driver and device, loading says so; with one (a GPU machine),
// the kernels run on it and match the interpreter: exactly, except outputs
// that call CUDA's log or pow, compared within 4 ulp (test kernels
// only: random kernels feed such values into further ops).
// Device copies of a Buffers' inputs and room for its outputs, freed at the
// end of the scope.
struct OnDevice {
  OnDevice(const runtime::CudaDriver& driver, const Buffers& b) : d(driver) {
    for (const auto& buf : b.in) {
      dev.emplace_back();
      EXPECT_EQ(d.cuMemAlloc(&dev.back(), buf.size()), runtime::kCudaSuccess);
      EXPECT_EQ(d.cuMemcpyHtoD(dev.back(), buf.data(), buf.size()), runtime::kCudaSuccess);
      in.push_back(reinterpret_cast<const void*>(dev.back()));
    }
    for (const auto& buf : b.out) {
      dev.emplace_back();
      EXPECT_EQ(d.cuMemAlloc(&dev.back(), buf.size()), runtime::kCudaSuccess);
      out.push_back(reinterpret_cast<void*>(dev.back()));
    }
  }
  ~OnDevice() {
    for (runtime::CUdeviceptr p : dev) d.cuMemFree(p);
  }
  const runtime::CudaDriver& d;
  std::vector<runtime::CUdeviceptr> dev;
  std::vector<const void*> in;
  std::vector<void*> out;
};

TEST(CudaCodegen, RunsOnTheGpuOrSaysThereIsNone) {
  const runtime::CudaKernelSource adam = SourceFor(testing::AdamKernel());
  auto ptx = runtime::CompileKernelPtx(adam, 80);
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  auto driver = runtime::CudaDriver::Load();
  if (!driver.ok()) {
    auto kernel = runtime::CudaKernel::Load(*ptx, adam.symbol, 4, 3, 4);
    ASSERT_FALSE(kernel.ok());
    EXPECT_EQ(kernel.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_HAS(kernel.status().message(), "no CUDA device");
    GTEST_SKIP() << "no GPU: " << driver.status().message();
  }
  const runtime::CudaDriver& d = **driver;
  auto cc = runtime::ComputeCapability(d, 0);
  ASSERT_TRUE(cc.ok()) << cc.status();
  for (const kir::Kernel& k : TestKernels()) {
    auto code = runtime::CompileKernelPtx(SourceFor(k), *cc);
    ASSERT_TRUE(code.ok()) << code.status();
    auto kernel = runtime::CudaKernel::Load(*code, CudaKernelSymbol(k), k.inputs.size(),
                                            k.outputs.size(), k.scalars.size());
    ASSERT_TRUE(kernel.ok()) << kernel.status();
    const int64_t n = 100003;
    Buffers want(k, n, 5), got(k, n, 5);
    ASSERT_TRUE(kir::Interpret(k, n, want.in_ptrs, want.out_ptrs, want.scalars).ok());
    OnDevice buffers(d, got);
    std::vector<const void*>& in = buffers.in;
    std::vector<void*>& out = buffers.out;
    ASSERT_TRUE((*kernel)->Launch(n, in, out, got.scalars, nullptr, 128).ok());
    ASSERT_EQ(d.cuCtxSynchronize(), runtime::kCudaSuccess);
    for (size_t o = 0; o < got.out.size(); ++o) {
      ASSERT_EQ(d.cuMemcpyDtoH(got.out[o].data(), reinterpret_cast<runtime::CUdeviceptr>(out[o]),
                               got.out[o].size()),
                runtime::kCudaSuccess);
      const int64_t tol = testing::IsTranscendental(k.outputs[o].name) ? 4 : 0;
      EXPECT_LE(MaxUlp(k, o, want, got, n), tol) << k.name << " " << k.outputs[o].name;
    }
  }
}


// The runtime's CUDA form of a program's kernel (CudaKernelCode ->
// CudaFusedKernel): compiled on the first launch through a fresh kernel
// cache, then a second kernel object on the same cache reads the PTX from
// disk; both runs over a size past one capped grid (65536 x 256) match the
// interpreter. Without a GPU the first launch says there is no CUDA device.
TEST(CudaFusedKernel, RunsThroughTheCacheOrSaysThereIsNone) {
  const kir::Kernel k = testing::AdamKernel();
  auto code = CudaKernelCode(k);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_TRUE(code->llvm_ir.empty());
  auto cache = runtime::KernelCache::Open(testing::MakeTempDir("mf_cuda_fused"));
  ASSERT_TRUE(cache.ok()) << cache.status();
  runtime::CudaFusedKernel first(*code, cache->get());
  auto driver = runtime::CudaDriver::Load();
  if (!driver.ok()) {
    const double scalars[4] = {0, 0, 0, 0};
    const absl::Status s =
        first.Launch(c10::Device(c10::kCUDA, 0), 1, nullptr, nullptr, scalars);
    ASSERT_FALSE(s.ok());
    EXPECT_HAS(s.message(), "no CUDA device");
    GTEST_SKIP() << "no GPU: " << driver.status().message();
  }
  const runtime::CudaDriver& d = **driver;
  const int64_t n = int64_t{65536} * 256 + 5;
  Buffers want(k, n, 7);
  ASSERT_TRUE(kir::Interpret(k, n, want.in_ptrs, want.out_ptrs, want.scalars).ok());
  const auto before = runtime::CudaFusedKernel::GetStats();
  runtime::CudaFusedKernel second(*code, cache->get());
  for (const runtime::CudaFusedKernel* kernel : {&first, &second}) {
    Buffers got(k, n, 7);
    OnDevice buffers(d, got);
    std::vector<const void*>& in = buffers.in;
    std::vector<void*>& out = buffers.out;
    const absl::Status s = kernel->Launch(c10::Device(c10::kCUDA, 0), n, in.data(),
                                          out.data(), got.scalars.data());
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_EQ(d.cuCtxSynchronize(), runtime::kCudaSuccess);
    for (size_t o = 0; o < got.out.size(); ++o) {
      ASSERT_EQ(d.cuMemcpyDtoH(got.out[o].data(), static_cast<runtime::CUdeviceptr>(
                                                      reinterpret_cast<uintptr_t>(out[o])),
                               got.out[o].size()),
                runtime::kCudaSuccess);
      EXPECT_EQ(MaxUlp(k, o, want, got, n), 0) << k.outputs[o].name;
    }
  }
  const auto after = runtime::CudaFusedKernel::GetStats();
  EXPECT_EQ(after.compiled - before.compiled, 1);   // the first kernel: NVRTC
  EXPECT_EQ(after.from_disk - before.from_disk, 1);  // the second: the cache
  EXPECT_EQ(after.launches - before.launches, 2);
}

}  // namespace
}  // namespace metafuse::codegen
