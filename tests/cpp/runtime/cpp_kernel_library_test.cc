// The C++/OpenMP host back end: kernels printed as C++, compiled by the
// system compiler into one shared object, cached, loaded from bytes; the
// same bits as the LLVM JIT; the refusals (wrong CPU level, not a shared
// object, a truncated one, no compiler, a compiler error).
#include "runtime/jit/cpp_kernel_library.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

#include "compiler/codegen/kernel_ir_parser.h"
#include "compiler/codegen/llvm_printer.h"
#include "runtime/jit/host_backend.h"
#include "runtime/jit/host_compiler.h"
#include "tests/cpp/codegen/host_kernel.h"
#include "tests/cpp/codegen/test_kernels.h"

namespace metafuse::runtime {
namespace {

namespace kir = codegen::kir;
using codegen::testing::Buffers;
using kir::DType;

bool HaveCompiler() { return FindHostCompiler().ok(); }

std::vector<KernelCode> TestKernelCodes() {
  std::vector<KernelCode> codes;
  for (const kir::Kernel& k :
       {codegen::testing::AllOpsKernel(DType::kF32), codegen::testing::AllOpsKernel(DType::kF64),
        codegen::testing::AdamKernel(), codegen::testing::PassThroughKernel(DType::kF64)}) {
    auto code = codegen::HostKernelCode(k);
    EXPECT_TRUE(code.ok()) << code.status();
    codes.push_back(*code);
  }
  return codes;
}

std::vector<const KernelCode*> Pointers(const std::vector<KernelCode>& codes) {
  std::vector<const KernelCode*> out;
  for (const KernelCode& c : codes) out.push_back(&c);
  return out;
}

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_.empty()) {
      unsetenv(name_);
    } else {
      setenv(name_, old_.c_str(), 1);
    }
  }

 private:
  const char* name_;
  std::string old_;
};

class TempCache {
 public:
  TempCache() {
    char tmpl[] = "/tmp/mf_cpp_library_cache_XXXXXX";
    dir_ = mkdtemp(tmpl);
    cache_ = *KernelCache::Open(dir_ + "/kernels");
  }
  ~TempCache() { std::filesystem::remove_all(dir_); }
  KernelCache* get() { return cache_.get(); }

 private:
  std::string dir_;
  std::unique_ptr<KernelCache> cache_;
};

// One compiler run for four kernels; each gives the LLVM JIT's bits (the
// interpreter's up to libm: both back ends round op by op, no contraction).
TEST(CppKernelLibrary, OneSharedObjectRunsLikeTheLlvmJit) {
  if (!HaveCompiler()) GTEST_SKIP() << "no C++ compiler on PATH";
  const std::vector<KernelCode> codes = TestKernelCodes();
  auto library = BuildCppKernelLibrary(Pointers(codes), nullptr);
  ASSERT_TRUE(library.ok()) << library.status();
  EXPECT_FALSE(library->cache_hit);
  EXPECT_EQ(library->target, HostCodeTarget());
  EXPECT_EQ(library->functions.size(), codes.size());
  for (const KernelCode& code : codes) {
    auto kernel = JitKernel::FromLibrary(code, *library);
    ASSERT_TRUE(kernel.ok()) << kernel.status();
    auto parsed = codegen::kir::Parse(code.kernel_ir);
    ASSERT_TRUE(parsed.ok());
    auto jit = JitKernel::Create(code, nullptr);
    ASSERT_TRUE(jit.ok()) << jit.status();
    for (int64_t n : {1, 7, 1031, 100003}) {
      Buffers cpp(*parsed, n, 3), llvm(*parsed, n, 3);
      ASSERT_TRUE((*kernel)->Run(n, cpp.in_ptrs, cpp.out_ptrs, cpp.scalars, 8192).ok());
      ASSERT_TRUE((*jit)->Run(n, llvm.in_ptrs, llvm.out_ptrs, llvm.scalars, 8192).ok());
      for (size_t o = 0; o < parsed->outputs.size(); ++o) {
        // libm's log/tanh/pow may be its vector variants in one and scalar in the other.
        const int64_t tol = codegen::testing::IsTranscendental(parsed->outputs[o].name) ? 4 : 0;
        int64_t where = -1;
        EXPECT_LE(codegen::testing::MaxUlp(*parsed, o, llvm, cpp, n, &where), tol)
            << code.name << " output " << parsed->outputs[o].name << " n=" << n << " at "
            << where;
      }
    }
  }
}

TEST(CppKernelLibrary, SecondBuildComesFromTheCacheAndArtifactBytesLoad) {
  if (!HaveCompiler()) GTEST_SKIP() << "no C++ compiler on PATH";
  TempCache cache;
  const std::vector<KernelCode> codes = TestKernelCodes();
  auto first = BuildCppKernelLibrary(Pointers(codes), cache.get());
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = BuildCppKernelLibrary(Pointers(codes), cache.get());
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_FALSE(first->cache_hit);
  EXPECT_TRUE(second->cache_hit);
  EXPECT_EQ(first->bytes, second->bytes);
  // An artifact's bytes load with no compiler at all.
  ScopedEnv no_compiler("METAFUSE_CXX", "/nonexistent/c++");
  auto loaded = LoadCppKernelLibrary(Pointers(codes), first->bytes, first->target);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->functions.size(), codes.size());
}

TEST(CppKernelLibrary, RefusesAForeignLevelGarbageAndATruncatedObject) {
  if (!HaveCompiler()) GTEST_SKIP() << "no C++ compiler on PATH";
  const std::vector<KernelCode> codes = TestKernelCodes();
  auto library = BuildCppKernelLibrary(Pointers(codes), nullptr);
  ASSERT_TRUE(library.ok()) << library.status();

  auto foreign = LoadCppKernelLibrary(Pointers(codes), library->bytes, "x86-64-v9");
  ASSERT_FALSE(foreign.ok());
  EXPECT_NE(foreign.status().message().find("x86-64-v9"), std::string::npos)
      << foreign.status();

  auto garbage = LoadCppKernelLibrary(Pointers(codes), std::string(4096, 'x'), library->target);
  ASSERT_FALSE(garbage.ok());
  EXPECT_NE(garbage.status().message().find("not an ELF"), std::string::npos)
      << garbage.status();

  auto truncated = LoadCppKernelLibrary(
      Pointers(codes), library->bytes.substr(0, library->bytes.size() / 3), library->target);
  ASSERT_FALSE(truncated.ok());
  EXPECT_NE(truncated.status().message().find("truncated"), std::string::npos)
      << truncated.status();
  // Every cut, at a few places, is refused without crashing the process.
  for (size_t cut : {size_t{64}, library->bytes.size() / 2, library->bytes.size() - 1}) {
    EXPECT_FALSE(
        LoadCppKernelLibrary(Pointers(codes), library->bytes.substr(0, cut), library->target)
            .ok())
        << "cut at " << cut;
  }

  // A shared object without one of the kernels named.
  std::vector<KernelCode> more = codes;
  more.push_back(more[0]);
  more.back().name = "fused_not_in_the_object";
  auto missing = LoadCppKernelLibrary(Pointers(more), library->bytes, library->target);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("mf_fused_not_in_the_object"), std::string::npos);
}

// Two objects loaded one after another, the first still alive: the loader
// knows objects by path, and a reused /proc/self/fd/N would hand back the
// first (its functions, not the second's).
TEST(CppKernelLibrary, TwoLiveObjectsAreDistinct) {
  if (!HaveCompiler()) GTEST_SKIP() << "no C++ compiler on PATH";
  const std::vector<KernelCode> codes = TestKernelCodes();
  auto first = BuildCppKernelLibrary({&codes[0]}, nullptr);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = BuildCppKernelLibrary({&codes[2]}, nullptr);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->functions.count(codes[2].name), 1u);
  EXPECT_NE(first->object.get(), second->object.get());
}

TEST(CppKernelLibrary, CpuLevelsAreOrdered) {
  EXPECT_TRUE(CpuCanRun(HostCodeTarget()).ok());
  if (HostCodeTarget().rfind("x86-64", 0) == 0) {
    EXPECT_TRUE(CpuCanRun("x86-64").ok());
    EXPECT_FALSE(CpuCanRun("aarch64 baseline").ok());
  }
  EXPECT_FALSE(CpuCanRun("x86-64-v9").ok());
}

TEST(HostCompiler, ErrorsNameTheVariableAndCarryDiagnostics) {
  {
    ScopedEnv bad("METAFUSE_CXX", "/nonexistent/c++");
    auto found = FindHostCompiler();
    ASSERT_FALSE(found.ok());
    EXPECT_NE(found.status().message().find("METAFUSE_CXX"), std::string::npos);
    auto built = BuildCppKernelLibrary(Pointers(TestKernelCodes()), nullptr);
    EXPECT_FALSE(built.ok());
  }
  if (!HaveCompiler()) GTEST_SKIP() << "no C++ compiler here (METAFUSE_CXX, c++, g++, clang++)";
  auto failed = CompileSharedObject("int broken( {", "a broken source");
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("a broken source"), std::string::npos);
  EXPECT_NE(failed.status().message().find("error"), std::string::npos) << failed.status();
}

TEST(HostBackend, EnvironmentChoosesAndBadValuesAreNamed) {
  {
    ScopedEnv cpp("METAFUSE_HOST_BACKEND", "cpp");
    auto b = SelectedHostBackend();
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(*b, HostBackend::kCpp);
  }
  {
    ScopedEnv bad("METAFUSE_HOST_BACKEND", "ptx");
    auto b = SelectedHostBackend();
    ASSERT_FALSE(b.ok());
    EXPECT_NE(b.status().message().find("METAFUSE_HOST_BACKEND='ptx'"), std::string::npos);
  }
  unsetenv("METAFUSE_HOST_BACKEND");
  auto b = SelectedHostBackend();
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, LlvmAvailable() ? HostBackend::kLlvm : HostBackend::kCpp);
}

}  // namespace
}  // namespace metafuse::runtime
