#include "compiler/codegen/cpp_printer.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "compiler/codegen/llvm_printer.h"
#include "tests/cpp/codegen/host_kernel.h"
#include "tests/cpp/codegen/test_kernels.h"

namespace metafuse::codegen {
namespace {

using kir::DType;
using testing::AdamKernel;
using testing::AllOpsKernel;
using testing::Buffers;
using testing::IsTranscendental;
using testing::MaxUlp;

using Fn = void (*)(int64_t, int64_t, void* const*, void* const*, const double*);

// With kCppCompileFlags, g++ vectorizes an exp/sigmoid loop too.
TEST(CppCodegen, SystemCompilerVectorizesExp) {
  if (std::system("g++ --version > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "no g++ on PATH";
  }
  kir::KernelBuilder b("silu");
  int x = b.Input("x", DType::kF32);
  b.Output("y", b.Mul(x, b.Sigmoid(x)));
  auto src = PrintCppSource(*b.Build());
  ASSERT_TRUE(src.ok());
  char tmpl[] = "/tmp/mf_cpp_vec_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  std::ofstream(dir + "/silu.cc") << *src;
  const std::string cmd = std::string("g++ ") + kCppCompileFlags + " -c " + dir +
                          "/silu.cc -o " + dir + "/silu.o -fopt-info-vec-optimized=" + dir +
                          "/vec.txt";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::stringstream vec;
  vec << std::ifstream(dir + "/vec.txt").rdbuf();
  EXPECT_NE(vec.str().find("loop vectorized"), std::string::npos) << vec.str();
  std::filesystem::remove_all(dir);
}

TEST(CppCodegen, PrintsAnOpenMpSimdLoop) {
  auto src = PrintCppSource(AdamKernel());
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_NE(src->find("extern \"C\" void mf_adam_f32(int64_t begin, int64_t end"),
            std::string::npos) << *src;
  EXPECT_NE(src->find("#pragma omp parallel for simd"), std::string::npos);
  EXPECT_NE(src->find("const float* __restrict in0 = static_cast<const float*>(inputs[0]);"),
            std::string::npos);
  EXPECT_NE(src->find("std::sqrt(v"), std::string::npos);
  kir::Kernel bad = AdamKernel();
  bad.nodes[4].index = 9;
  EXPECT_FALSE(PrintCppKernel(bad).ok());
}

// Compiles the printed source with the system compiler (one shared object
// for all kernels), loads it, and checks it against the interpreter and the
// LLVM JIT on random inputs, both dtypes, odd sizes. Tolerance as for the
// JIT: exact, 2 ulp for libm calls.
TEST(CppCodegen, SystemCompilerMatchesInterpreterAndJit) {
  if (std::system("g++ --version > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "no g++ on PATH";
  }
  const std::vector<kir::Kernel> kernels = {
      AllOpsKernel(DType::kF32), AllOpsKernel(DType::kF64), AdamKernel(),
      testing::PassThroughKernel(DType::kF32), testing::PassThroughKernel(DType::kF64)};
  std::string source = CppPrelude();
  for (const kir::Kernel& k : kernels) {
    auto body = PrintCppKernel(k);
    ASSERT_TRUE(body.ok()) << body.status();
    source += *body;
  }
  char tmpl[] = "/tmp/mf_cpp_codegen_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  std::ofstream(dir + "/kernels.cc") << source;
  const std::string cmd = std::string("g++ ") + kCppCompileFlags + " -shared -fPIC " + dir +
                          "/kernels.cc -o " + dir + "/kernels.so -fopt-info-vec-optimized=" +
                          dir + "/vec.txt 2> " + dir + "/log.txt";
  ASSERT_EQ(std::system(cmd.c_str()), 0)
      << cmd << "\n" << std::ifstream(dir + "/log.txt").rdbuf() << "\n" << source;
  // g++ reports which loops it vectorized: the Adam and pass-through kernels'
  // loops (the all-ops kernels call libm's log and pow: scalar).
  std::stringstream vec;
  vec << std::ifstream(dir + "/vec.txt").rdbuf();
  EXPECT_NE(vec.str().find("loop vectorized"), std::string::npos) << vec.str();
  void* lib = dlopen((dir + "/kernels.so").c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();

  for (const kir::Kernel& k : kernels) {
    auto fn = reinterpret_cast<Fn>(dlsym(lib, LlvmKernelSymbol(k).c_str()));
    ASSERT_NE(fn, nullptr) << LlvmKernelSymbol(k);
    auto jit = testing::CompileHostKernel(k);
    ASSERT_TRUE(jit.ok()) << jit.status();
    for (int64_t n : {1, 7, 1031, 100003}) {
      Buffers want(k, n, 7), cpp(k, n, 7), llvm(k, n, 7);
      ASSERT_TRUE(kir::Interpret(k, n, want.in_ptrs, want.out_ptrs, want.scalars).ok());
      fn(0, n, const_cast<void* const*>(cpp.in_ptrs.data()), cpp.out_ptrs.data(),
         cpp.scalars.data());
      ASSERT_TRUE((*jit)->Run(n, llvm.in_ptrs, llvm.out_ptrs, llvm.scalars, 8192).ok());
      for (size_t o = 0; o < k.outputs.size(); ++o) {
        const int64_t tol = IsTranscendental(k.outputs[o].name) ? 2 : 0;
        int64_t where = -1;
        EXPECT_LE(MaxUlp(k, o, want, cpp, n, &where), tol)
            << k.name << " C++ output " << k.outputs[o].name << " n=" << n << " at " << where;
        EXPECT_LE(MaxUlp(k, o, llvm, cpp, n, &where), tol)
            << k.name << " C++ vs JIT output " << k.outputs[o].name << " n=" << n;
      }
    }
  }
  dlclose(lib);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace metafuse::codegen
