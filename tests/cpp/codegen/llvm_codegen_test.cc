#include "compiler/codegen/llvm_printer.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <regex>

#include "tests/cpp/codegen/host_kernel.h"
#include "tests/cpp/codegen/test_kernels.h"

namespace metafuse::codegen {
using runtime::JitKernel;
using runtime::KernelCache;
using runtime::LlvmJit;
using runtime::LlvmHostTarget;
namespace {

using kir::DType;
using testing::AdamKernel;
using testing::AllOpsKernel;
using testing::Buffers;
using testing::IsTranscendental;
using testing::MaxUlp;

// The JIT against the reference interpreter on random data, every op and
// access pattern, odd sizes (remainder loops), both dtypes. Arithmetic,
// sqrt, compares and casts must match exactly; libm calls within 2 ulp (the
// JIT calls the same libm, so in practice they match exactly too).
TEST(LlvmCodegen, JitMatchesInterpreter) {
  for (kir::Kernel k : {AllOpsKernel(DType::kF32), AllOpsKernel(DType::kF64),
                        testing::PassThroughKernel(DType::kF32),
                        testing::PassThroughKernel(DType::kF64),
                        testing::RowsKernel(DType::kF32), testing::RowsKernel(DType::kF64)}) {
    auto ck = testing::CompileHostKernel(k);
    ASSERT_TRUE(ck.ok()) << ck.status();
    int64_t worst = 0;
    for (int64_t n : {1, 7, 1031, 100003}) {
      Buffers want(k, n, 42), got(k, n, 42);
      ASSERT_TRUE(kir::Interpret(k, n, want.in_ptrs, want.out_ptrs, want.scalars).ok());
      // A small grain so that 100003 runs as many parallel chunks.
      ASSERT_TRUE((*ck)->Run(n, got.in_ptrs, got.out_ptrs, got.scalars, 4096).ok());
      for (size_t o = 0; o < k.outputs.size(); ++o) {
        int64_t where = -1;
        const int64_t ulp = MaxUlp(k, o, want, got, n, &where);
        worst = std::max(worst, ulp);
        EXPECT_LE(ulp, IsTranscendental(k.outputs[o].name) ? 2 : 0)
            << k.name << " output " << k.outputs[o].name << " n=" << n << " at " << where;
      }
    }
    std::cout << k.name << ": largest JIT vs interpreter difference " << worst << " ulp\n";
  }
}

// The hot loop is vectorized for the host: the optimized module computes on
// LLVM vector types (<4 x float> with SSE, <8 x float> with AVX2, ...).
TEST(LlvmCodegen, AdamLoopIsVectorized) {
  for (DType t : {DType::kF32, DType::kF64}) {
    auto ck = testing::CompileHostKernel(AdamKernel(t));
    ASSERT_TRUE(ck.ok()) << ck.status();
    const std::string& ir = (*ck)->optimized_ir();
    const std::string elem = t == DType::kF32 ? "float" : "double";
    std::smatch m;
    ASSERT_TRUE(std::regex_search(ir, m, std::regex("<(\\d+) x " + elem + ">")))
        << "no vector type in the optimized IR:\n" << ir;
    EXPECT_TRUE(std::regex_search(ir, std::regex("fdiv <\\d+ x " + elem + ">")));
    EXPECT_TRUE(std::regex_search(ir, std::regex("llvm\\.sqrt\\.v\\d+f" + std::string(
                                                     t == DType::kF32 ? "32" : "64"))));
    // No runtime alias checks were needed: the buffers are noalias.
    EXPECT_EQ(ir.find("vector.memcheck"), std::string::npos);
    std::cout << elem << ": vector width " << m[1] << " on " << LlvmHostTarget().substr(0, 24)
              << "..., compiled in " << (*ck)->compile_seconds() << " s\n";
  }
}

// The object file LLVM emits for a module can be loaded into another JIT
// (that is what the kernel cache stores).
TEST(LlvmCodegen, JitObjectFilesRoundTrip) {
  kir::Kernel k = AdamKernel();
  auto ir = PrintLlvmIr(k);
  ASSERT_TRUE(ir.ok());
  auto first = LlvmJit::Create();
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE((*first)->AddModule("adam_module", *ir).ok());
  EXPECT_EQ((*first)->ObjectFile("adam_module").status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE((*first)->Lookup(LlvmKernelSymbol(k)).ok());
  auto object = (*first)->ObjectFile("adam_module");
  ASSERT_TRUE(object.ok()) << object.status();
  EXPECT_EQ(object->substr(0, 4), "\x7f" "ELF");
  auto second = LlvmJit::Create();
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE((*second)->AddObjectFile("adam_object", *object).ok());
  auto fn = (*second)->Lookup(LlvmKernelSymbol(k));
  ASSERT_TRUE(fn.ok()) << fn.status();
  Buffers want(k, 33, 5), got(k, 33, 5);
  ASSERT_TRUE(kir::Interpret(k, 33, want.in_ptrs, want.out_ptrs, want.scalars).ok());
  reinterpret_cast<JitKernel::Fn>(*fn)(0, 33, const_cast<void* const*>(got.in_ptrs.data()),
                                            got.out_ptrs.data(), got.scalars.data());
  for (size_t o = 0; o < 3; ++o) EXPECT_EQ(MaxUlp(k, o, want, got, 33), 0);
  EXPECT_FALSE((*second)->AddObjectFile("junk", "not an object").ok());
}

TEST(LlvmCodegen, UlpDistance) {
  EXPECT_EQ(testing::UlpDistance(1.0, std::nextafter(1.0f, 2.0f), DType::kF32), 1);
  EXPECT_EQ(testing::UlpDistance(-0.0, 0.0, DType::kF32), 0);
  EXPECT_EQ(testing::UlpDistance(-1e-45, 1e-45, DType::kF32), 2);
  EXPECT_EQ(testing::UlpDistance(1.0, std::nextafter(1.0, 0.0), DType::kF64), 1);
}

// exp, sigmoid and tanh are arithmetic (compiler/codegen/kernel_math.h), not
// libm calls, so their loops vectorize too. (Loops with log or pow stay
// scalar.)
TEST(LlvmCodegen, ExpSigmoidAndTanhLoopsAreVectorized) {
  for (DType t : {DType::kF32, DType::kF64}) {
    kir::KernelBuilder b("act");
    int x = b.Input("x", t);
    b.Output("e", b.Exp(x));
    b.Output("s", b.Sigmoid(x));
    b.Output("h", b.Tanh(x));
    auto k = b.Build();
    ASSERT_TRUE(k.ok());
    auto ck = testing::CompileHostKernel(*k);
    ASSERT_TRUE(ck.ok()) << ck.status();
    const std::string elem = t == DType::kF32 ? "float" : "double";
    EXPECT_TRUE(std::regex_search((*ck)->optimized_ir(),
                                  std::regex("fmul <\\d+ x " + elem + ">")))
        << (*ck)->optimized_ir();
    EXPECT_EQ((*ck)->optimized_ir().find("@exp"), std::string::npos);
  }
}

// A kernel whose positional reads all have periods that are multiples of 16
// runs row by row: the loop inside a row has no division and vectorizes,
// and any [begin, end) split (rows cut anywhere) gives the interpreter's
// bits.
TEST(LlvmCodegen, RowsLoopMatchesForAnySplitAndVectorizes) {
  for (DType t : {DType::kF32, DType::kF64}) {
    kir::Kernel k = testing::RowsKernel(t);
    auto ck = testing::CompileHostKernel(k);
    ASSERT_TRUE(ck.ok()) << ck.status();
    const std::string elem = t == DType::kF32 ? "float" : "double";
    EXPECT_TRUE(std::regex_search((*ck)->optimized_ir(),
                                  std::regex("fadd <\\d+ x " + elem + ">")))
        << (*ck)->optimized_ir();
    EXPECT_FALSE(std::regex_search((*ck)->optimized_ir(), std::regex("udiv <")))
        << "division inside the vector loop";
    const int64_t n = 3 * 5 * 64 * 4 + 7;
    Buffers want(k, n, 9), got(k, n, 9);
    ASSERT_TRUE(kir::Interpret(k, n, want.in_ptrs, want.out_ptrs, want.scalars).ok());
    const int64_t cuts[] = {0, 1, 5, 17, 31, 32, 33, 300, 961, 1031, 2000, n};
    for (size_t c = 0; c + 1 < std::size(cuts); ++c) {
      (*ck)->function()(cuts[c], cuts[c + 1], const_cast<void* const*>(got.in_ptrs.data()),
                        got.out_ptrs.data(), got.scalars.data());
    }
    for (size_t o = 0; o < k.outputs.size(); ++o) {
      int64_t where = -1;
      EXPECT_EQ(MaxUlp(k, o, want, got, n, &where), 0)
          << k.name << " output " << k.outputs[o].name << " at " << where;
    }
  }
}

// Kernels can share one JIT (the fused-kernel registry does): each keeps
// computing its own function; a null JIT is refused.
TEST(LlvmCodegen, KernelsShareOneJit) {
  auto created = LlvmJit::Create();
  ASSERT_TRUE(created.ok()) << created.status();
  std::shared_ptr<LlvmJit> jit(*std::move(created));
  std::vector<std::unique_ptr<JitKernel>> kernels;
  for (const char* name : {"twice", "square"}) {
    kir::KernelBuilder b(name);
    int x = b.Input("x", DType::kF64);
    b.Output("y", std::string(name) == "twice" ? b.Add(x, x) : b.Mul(x, x));
    auto k = b.Build();
    ASSERT_TRUE(k.ok());
    auto ck = testing::CompileHostKernel(*k, nullptr, jit);
    ASSERT_TRUE(ck.ok()) << ck.status();
    kernels.push_back(*std::move(ck));
  }
  const double in[3] = {1.5, -2.0, 3.0};
  double twice[3], square[3];
  ASSERT_TRUE(kernels[0]->Run(3, {in}, {twice}, {}).ok());
  ASSERT_TRUE(kernels[1]->Run(3, {in}, {square}, {}).ok());
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(twice[i], 2 * in[i]);
    EXPECT_EQ(square[i], in[i] * in[i]);
  }
  kir::KernelBuilder b("none");
  b.Output("y", b.Input("x", DType::kF64));
  auto none = testing::CompileHostKernel(*b.Build(), nullptr, nullptr, false);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(std::string(none.status().message()).find("`jit` is null"), std::string::npos);
}

TEST(LlvmCodegen, PrintedIrShape) {
  auto ir = PrintLlvmIr(AdamKernel());
  ASSERT_TRUE(ir.ok());
  EXPECT_HAS(*ir, "define void @mf_adam_f32(i64 %begin, i64 %end, i8** nocapture readonly "
                  "%inputs, i8** nocapture readonly %outputs, double* nocapture readonly "
                  "%scalars)");
  EXPECT_HAS(*ir, "float* noalias nocapture readonly %in0");
  EXPECT_HAS(*ir, "getelementptr inbounds float, float* %in0, i64 %i");
  EXPECT_HAS(*ir, "declare float @llvm.sqrt.f32(float)");
  kir::Kernel bad = AdamKernel();
  bad.outputs.clear();
  EXPECT_HAS(PrintLlvmIr(bad).status().message(), "has no outputs");
}

TEST(LlvmCodegen, RunInPlaceAndChecks) {
  kir::Kernel k = AdamKernel();
  auto ck = testing::CompileHostKernel(k);
  ASSERT_TRUE(ck.ok());
  const int64_t n = 100;
  Buffers want(k, n, 1), got(k, n, 1);
  ASSERT_TRUE(kir::Interpret(k, n, want.in_ptrs, want.out_ptrs, want.scalars).ok());
  // In place: p, m, v are updated where they are.
  std::vector<void*> outs = {const_cast<void*>(got.in_ptrs[2]),
                             const_cast<void*>(got.in_ptrs[3]),
                             const_cast<void*>(got.in_ptrs[0])};
  ASSERT_TRUE((*ck)->Run(n, got.in_ptrs, outs, got.scalars).ok());
  EXPECT_EQ(std::memcmp(want.out[2].data(), got.in[0].data(), n * 4), 0);
  EXPECT_EQ(std::memcmp(want.out[0].data(), got.in[2].data(), n * 4), 0);
  // An output shifted against an input, two outputs on one buffer, nulls,
  // wrong counts: errors that name the buffers.
  float* p = static_cast<float*>(const_cast<void*>(got.in_ptrs[0]));
  std::vector<void*> shifted = {got.out_ptrs[0], got.out_ptrs[1], p + 1};
  EXPECT_HAS((*ck)->Run(n, got.in_ptrs, shifted, got.scalars).message(),
             "output 'p_out' overlaps input 'p'");
  std::vector<void*> same = {got.out_ptrs[0], got.out_ptrs[0], got.out_ptrs[2]};
  EXPECT_HAS((*ck)->Run(n, got.in_ptrs, same, got.scalars).message(),
             "outputs 'm_out' and 'v_out' overlap");
  std::vector<const void*> null_in = got.in_ptrs;
  null_in[1] = nullptr;
  EXPECT_HAS((*ck)->Run(n, null_in, got.out_ptrs, got.scalars).message(), "input 'g' is null");
  EXPECT_HAS((*ck)->Run(n, got.in_ptrs, got.out_ptrs, {}).message(),
             "takes 4 inputs, 3 outputs, 4 scalars; got 4, 3, 0");
  EXPECT_TRUE((*ck)->Run(0, got.in_ptrs, got.out_ptrs, got.scalars).ok());
}

// A fresh cache over a temporary directory: the first compile misses and
// stores the LLVM IR; compiling again (same process, then a new cache
// object on the same directory, as a new process would) hits.
TEST(LlvmCodegen, SecondCompileIsACacheHit) {
  char tmpl[] = "/tmp/mf_codegen_cache_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = std::string(tmpl) + "/kernels";
  {
    auto cache = KernelCache::Open(dir);
    ASSERT_TRUE(cache.ok()) << cache.status();
    auto first = testing::CompileHostKernel(AdamKernel(), cache->get());
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_FALSE((*first)->cache_hit());
    auto second = testing::CompileHostKernel(AdamKernel(), cache->get());
    ASSERT_TRUE(second.ok());
    EXPECT_TRUE((*second)->cache_hit());
    EXPECT_TRUE((*second)->optimized_ir().empty());  // nothing was optimized
    EXPECT_EQ((*second)->code().llvm_ir, (*first)->code().llvm_ir);
    EXPECT_EQ((*cache)->stats().misses, 1);
    EXPECT_EQ((*cache)->stats().memory_hits, 1);
    // A different kernel is a miss.
    auto other = testing::CompileHostKernel(AdamKernel(DType::kF64), cache->get());
    ASSERT_TRUE(other.ok());
    EXPECT_FALSE((*other)->cache_hit());
  }
  auto fresh = KernelCache::Open(dir);
  ASSERT_TRUE(fresh.ok());
  auto third = testing::CompileHostKernel(AdamKernel(), fresh->get());
  ASSERT_TRUE(third.ok());
  EXPECT_TRUE((*third)->cache_hit());
  EXPECT_EQ((*fresh)->stats().disk_hits, 1);
  kir::Kernel k = AdamKernel();
  Buffers want(k, 77, 3), got(k, 77, 3);
  ASSERT_TRUE(kir::Interpret(k, 77, want.in_ptrs, want.out_ptrs, want.scalars).ok());
  ASSERT_TRUE((*third)->Run(77, got.in_ptrs, got.out_ptrs, got.scalars).ok());
  for (size_t o = 0; o < 3; ++o) EXPECT_EQ(MaxUlp(k, o, want, got, 77), 0);
  std::filesystem::remove_all(tmpl);
}

}  // namespace
}  // namespace metafuse::codegen
