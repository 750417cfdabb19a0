// runtime/executor/reducing_launch called directly on a kernel written here
// in LLVM IR (no compiler): out0[i] = x[i] in x's dtype, out1[i] = x[i]^2
// in double. Every access form of a reduction (broadcast, inner, outer,
// middle, periodic, the latter both by period and by run), float32 and
// float64 sources, a mean's scale, scratch outputs that are never
// materialized, one thread and a team of four, loops shorter and longer
// than a block, n = 0; each result against a scalar loop over the
// definition of the access forms (compiler/codegen/kernel_ir.h). And the
// refusals: a reduction that does not fit its loop throws naming the kernel.
#include "runtime/executor/reducing_launch.h"

#include <gtest/gtest.h>
#include <omp.h>
#include <torch/torch.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/jit/jit_kernel.h"

namespace metafuse::runtime {
namespace {

constexpr int64_t kBroadcast = 1, kInner = 2, kOuter = 3, kMiddle = 4, kPeriodic = 5;

// The host kernel entry point (jit_kernel.h) for one dtype T of x:
// out0[i] = x[i] (T), out1[i] = double(x[i]) * double(x[i]).
std::string CopyAndSquareIr(const std::string& name, bool f32) {
  const std::string t = f32 ? "float" : "double";
  const std::string square =
      f32 ? "  %xd = fpext float %x to double\n  %sq = fmul double %xd, %xd\n"
          : "  %sq = fmul double %x, %x\n";
  return absl::StrCat(
      "define void @mf_", name,
      "(i64 %begin, i64 %end, i8** %inputs, i8** %outputs, double* %scalars) {\n"
      "entry:\n"
      "  %in.raw = load i8*, i8** %inputs, align 8\n"
      "  %in = bitcast i8* %in.raw to ", t, "*\n",
      "  %o0.raw = load i8*, i8** %outputs, align 8\n"
      "  %o0 = bitcast i8* %o0.raw to ", t, "*\n",
      "  %o1.slot = getelementptr i8*, i8** %outputs, i64 1\n"
      "  %o1.raw = load i8*, i8** %o1.slot, align 8\n"
      "  %o1 = bitcast i8* %o1.raw to double*\n"
      "  %none = icmp sge i64 %begin, %end\n"
      "  br i1 %none, label %done, label %loop\n"
      "loop:\n"
      "  %i = phi i64 [ %begin, %entry ], [ %next, %loop ]\n"
      "  %px = getelementptr ", t, ", ", t, "* %in, i64 %i\n",
      "  %x = load ", t, ", ", t, "* %px\n",
      "  %p0 = getelementptr ", t, ", ", t, "* %o0, i64 %i\n",
      "  store ", t, " %x, ", t, "* %p0\n", square,
      "  %p1 = getelementptr double, double* %o1, i64 %i\n"
      "  store double %sq, double* %p1\n"
      "  %next = add i64 %i, 1\n"
      "  %end.reached = icmp eq i64 %next, %end\n"
      "  br i1 %end.reached, label %done, label %loop\n"
      "done:\n"
      "  ret void\n"
      "}\n");
}

const JitKernel& Kernel(at::ScalarType dtype) {
  auto make = [](bool f32) {
    KernelCode code;
    code.name = f32 ? "copy_square_f32" : "copy_square_f64";
    code.llvm_ir = CopyAndSquareIr(code.name, f32);
    code.input_dtypes = {f32 ? at::kFloat : at::kDouble};
    code.input_access = {0};
    code.input_inner = {1};
    code.input_mid = {1};
    code.output_dtypes = {f32 ? at::kFloat : at::kDouble, at::kDouble};
    auto kernel = JitKernel::Create(code);
    EXPECT_TRUE(kernel.ok()) << kernel.status();
    return kernel.ok() ? std::shared_ptr<JitKernel>(*std::move(kernel)) : nullptr;
  };
  static const std::shared_ptr<JitKernel> f32 = make(true), f64 = make(false);
  const std::shared_ptr<JitKernel>& k = dtype == at::kFloat ? f32 : f64;
  if (k == nullptr) throw std::runtime_error("the test kernel did not compile");
  return *k;
}

// Where element i lands, from the access forms' definition.
int64_t ReducedIndex(const LaunchPlan::Reduction& r, int64_t i) {
  switch (r.access) {
    case kBroadcast: return 0;
    case kInner: return i % r.inner;
    case kOuter: return i / r.inner;
    case kMiddle: return i / (r.mid * r.inner) * r.inner + i % r.inner;
    case kPeriodic: return i / r.inner % r.mid;
  }
  return -1;
}

// The reduction by its definition: every element added in order, in
// double, then scaled; the result in `dtype`.
std::vector<double> NaiveReduction(const std::vector<double>& values,
                                   const LaunchPlan::Reduction& r, int64_t count,
                                   at::ScalarType dtype) {
  std::vector<double> acc(count, 0.0);
  for (int64_t i = 0; i < static_cast<int64_t>(values.size()); ++i) {
    acc[ReducedIndex(r, i)] += values[i];
  }
  for (double& a : acc) {
    a *= r.scale;
    if (dtype == at::kFloat) a = static_cast<float>(a);
  }
  return acc;
}

LaunchPlan::Reduction Reduction(int64_t source, int64_t access, int64_t inner, int64_t mid,
                                std::vector<int64_t> out_sizes, double scale = 1.0) {
  LaunchPlan::Reduction r;
  r.source = source;
  r.access = access;
  r.inner = inner;
  r.mid = mid;
  r.scale = scale;
  r.out_sizes = std::move(out_sizes);
  return r;
}

int64_t Numel(const std::vector<int64_t>& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

class ThreadCount {
 public:
  explicit ThreadCount(int threads) : before_(omp_get_max_threads()) {
    omp_set_num_threads(threads);
  }
  ~ThreadCount() { omp_set_num_threads(before_); }

 private:
  int before_;
};

// One launch of the copy-and-square kernel over x with `reductions`,
// output 1 a scratch output when `scratch`; every result checked against
// the naive loop, exactly (see Cases), and output 0 against x.
void CheckLaunch(const at::Tensor& x, const std::vector<LaunchPlan::Reduction>& reductions,
                 bool scratch, const std::string& what) {
  const at::ScalarType dtype = x.scalar_type();
  const int64_t n = x.numel();
  at::Tensor out0 = at::full({n}, -1.0, x.options());
  at::Tensor out1 = at::full({n}, -1.0, at::TensorOptions().dtype(at::kDouble));
  const void* inputs[] = {x.data_ptr()};
  void* outputs[] = {out0.data_ptr(), scratch ? nullptr : out1.data_ptr()};
  const std::vector<at::Tensor> got = RunReducing(Kernel(dtype), n, inputs, outputs, nullptr,
                                                  {dtype, at::kDouble}, reductions);
  ASSERT_EQ(got.size(), reductions.size()) << what;
  EXPECT_TRUE(at::equal(out0, x.reshape({n}))) << what << ": output 0";
  // Per source output, its values as the kernel defines them.
  const at::Tensor xd = x.to(at::kDouble).reshape({n}).contiguous();
  std::vector<double> copy(xd.data_ptr<double>(), xd.data_ptr<double>() + n), square(n);
  for (int64_t i = 0; i < n; ++i) square[i] = copy[i] * copy[i];
  if (!scratch) {
    EXPECT_TRUE(at::equal(out1, at::tensor(square, at::kDouble))) << what << ": output 1";
  } else {
    // Never written: still the fill.
    EXPECT_TRUE(at::equal(out1, at::full({n}, -1.0, at::kDouble))) << what << ": scratch";
  }
  for (size_t r = 0; r < reductions.size(); ++r) {
    const LaunchPlan::Reduction& red = reductions[r];
    const at::ScalarType rdtype = red.source == 0 ? dtype : at::kDouble;
    const std::vector<double> want = NaiveReduction(red.source == 0 ? copy : square, red,
                                                    Numel(red.out_sizes), rdtype);
    const std::string where = absl::StrCat(what, ": reduction ", r, " (access ", red.access,
                                           ", inner ", red.inner, ", mid ", red.mid, ")");
    ASSERT_EQ(got[r].scalar_type(), rdtype) << where;
    ASSERT_EQ(got[r].sizes(), c10::IntArrayRef(red.out_sizes)) << where;
    const at::Tensor gd = got[r].to(at::kDouble).contiguous();
    int mismatches = 0;
    for (size_t j = 0; j < want.size() && mismatches < 3; ++j) {
      if (gd.data_ptr<double>()[j] != want[j]) {
        ++mismatches;
        ADD_FAILURE() << where << " element " << j << ": got " << gd.data_ptr<double>()[j]
                      << ", want " << want[j];
      }
    }
  }
}

// x of small integers (|x| <= 8, x^2 <= 64): every partial sum, in float
// lanes or in double, is an integer far below 2^24, so the order of the
// additions cannot change a bit and results are compared exactly; a mean
// is the same double product rounded the same way.
at::Tensor SmallIntegers(c10::IntArrayRef sizes, at::ScalarType dtype) {
  return at::randint(-8, 9, sizes, at::TensorOptions().dtype(dtype));
}

// [N, C, H*W]-like loops, from shorter than one 8192-element block to
// several blocks (runs of an outer or periodic form crossing block ends:
// 300 and 2000 do not divide 8192) and past JitKernel::kDefaultGrain
// (several threads).
struct Shape {
  int64_t outer, mid, inner;
};
const Shape kShapes[] = {{1, 1, 1},   {3, 1, 5},   {2, 3, 7},    {4, 5, 300},
                         {3, 7, 2000}, {2, 9, 4100}, {1, 1, 40000}, {5, 16, 17}};

std::vector<LaunchPlan::Reduction> EveryForm(const Shape& s) {
  const int64_t n = s.outer * s.mid * s.inner;
  return {
      Reduction(0, kBroadcast, 1, 1, {}),
      Reduction(1, kBroadcast, 1, 1, {1}, 1.0 / n),  // a mean
      Reduction(0, kInner, s.mid * s.inner, 1, {s.mid, s.inner}),
      Reduction(1, kOuter, s.inner, 1, {s.outer * s.mid, 1}),
      Reduction(0, kMiddle, s.inner, s.mid, {s.outer, 1, s.inner}, 1.0 / s.mid),
      Reduction(1, kPeriodic, s.inner, s.mid, {1, s.mid, 1}),
      // The same per-channel sum with the planes seen as one long run each
      // (inner >= 256 sums run by run; smaller inner keeps per-period sums).
      Reduction(0, kPeriodic, s.inner, s.mid, {s.mid}, 0.5),
  };
}

class Dtypes : public ::testing::TestWithParam<at::ScalarType> {};

// Every shape, with and without a scratch output, on `threads` threads.
void CheckEveryShape(at::ScalarType dtype, int threads) {
  ThreadCount count(threads);
  for (const Shape& s : kShapes) {
    const at::Tensor x = SmallIntegers({s.outer, s.mid, s.inner}, dtype);
    for (bool scratch : {false, true}) {
      CheckLaunch(x, EveryForm(s), scratch,
                  absl::StrCat("[", s.outer, ", ", s.mid, ", ", s.inner, "] scratch ", scratch,
                               ", ", threads, " threads"));
    }
  }
}

TEST_P(Dtypes, EveryFormOnOneThread) { CheckEveryShape(GetParam(), 1); }
TEST_P(Dtypes, EveryFormOnFourThreads) { CheckEveryShape(GetParam(), 4); }

// Real values: a run of one reduced element is summed in vector lanes of
// the source's dtype, at most 8192 / 64 = 128 values per float lane (one
// block, four vectors of 16 lanes) before the lanes go to double. The
// error is then below 128 unit roundoffs of float times the sum of the
// magnitudes, plus the final rounding to float: 2e-5 relative to that sum
// covers both.
TEST(ReducingLaunch, RealFloatValuesWithinTheLaneBound) {
  ThreadCount four(4);
  const at::Tensor x = at::randn({3, 7, 2000});
  const int64_t n = x.numel();
  const std::vector<LaunchPlan::Reduction> reductions = {
      Reduction(0, kBroadcast, 1, 1, {}), Reduction(0, kOuter, 2000, 1, {21}),
      Reduction(0, kPeriodic, 2000, 7, {7})};
  at::Tensor out0 = at::empty({n});
  const void* inputs[] = {x.data_ptr()};
  void* outputs[] = {out0.data_ptr(), nullptr};
  const std::vector<at::Tensor> got = RunReducing(Kernel(at::kFloat), n, inputs, outputs,
                                                  nullptr, {at::kFloat, at::kDouble}, reductions);
  const at::Tensor xd = x.to(at::kDouble).reshape({n});
  std::vector<double> values(xd.data_ptr<double>(), xd.data_ptr<double>() + n), magnitudes(n);
  for (int64_t i = 0; i < n; ++i) magnitudes[i] = std::abs(values[i]);
  for (size_t r = 0; r < reductions.size(); ++r) {
    const int64_t count = Numel(reductions[r].out_sizes);
    const std::vector<double> want = NaiveReduction(values, reductions[r], count, at::kDouble);
    const std::vector<double> size = NaiveReduction(magnitudes, reductions[r], count, at::kDouble);
    const at::Tensor gd = got[r].to(at::kDouble);
    for (int64_t j = 0; j < count; ++j) {
      EXPECT_NEAR(gd.data_ptr<double>()[j], want[j], 2e-5 * size[j])
          << "reduction " << r << " element " << j;
    }
  }
}

TEST(ReducingLaunch, AnEmptyLoopGivesZeros) {
  const at::Tensor x = at::empty({0});
  const void* inputs[] = {x.data_ptr()};
  void* outputs[] = {nullptr, nullptr};
  const std::vector<at::Tensor> got =
      RunReducing(Kernel(at::kFloat), 0, inputs, outputs, nullptr, {at::kFloat, at::kDouble},
                  {Reduction(0, kBroadcast, 1, 1, {}), Reduction(1, kInner, 3, 1, {3}),
                   Reduction(0, kOuter, 4, 1, {0})});
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].item<float>(), 0.f);
  EXPECT_TRUE(at::equal(got[1], at::zeros({3}, at::kDouble)));
  EXPECT_EQ(got[2].numel(), 0);
}

// Each of these names the kernel and says the reduction does not fit.
TEST(ReducingLaunch, ARefusedReductionNamesTheKernel) {
  const at::Tensor x = SmallIntegers({10}, at::kFloat);
  at::Tensor out0 = at::empty({10}), out1 = at::empty({10}, at::kDouble);
  const void* inputs[] = {x.data_ptr()};
  void* outputs[] = {out0.data_ptr(), out1.data_ptr()};
  const std::vector<std::pair<std::string, LaunchPlan::Reduction>> refused = {
      {"no such output", Reduction(2, kBroadcast, 1, 1, {})},
      {"negative output", Reduction(-1, kBroadcast, 1, 1, {})},
      {"sizes of another count", Reduction(0, kInner, 5, 1, {4})},
      {"inner of zero", Reduction(0, kOuter, 0, 1, {})},
      {"mid of zero", Reduction(0, kPeriodic, 1, 0, {0})},
      {"an unknown access", Reduction(0, 9, 1, 1, {1})},
      // 10 elements are not whole runs of 3 (outer) or periods of 2 x 2
      // (middle): the last elements would land past the result.
      {"outer runs cut short", Reduction(0, kOuter, 3, 1, {3})},
      {"middle periods cut short", Reduction(0, kMiddle, 2, 2, {4})},
  };
  for (const auto& [what, reduction] : refused) {
    try {
      RunReducing(Kernel(at::kFloat), 10, inputs, outputs, nullptr, {at::kFloat, at::kDouble},
                  {reduction});
      ADD_FAILURE() << what << ": not refused";
    } catch (const c10::Error& e) {
      const std::string message = e.what_without_backtrace();
      EXPECT_NE(message.find("copy_square_f32"), std::string::npos) << what << ": " << message;
      EXPECT_NE(message.find("does not fit its loop of 10 elements"), std::string::npos)
          << what << ": " << message;
    }
  }
}

TEST(ReducingLaunch, AnIntegerSourceIsRefused) {
  const at::Tensor x = SmallIntegers({4}, at::kFloat);
  at::Tensor out0 = at::empty({4}), out1 = at::empty({4}, at::kDouble);
  const void* inputs[] = {x.data_ptr()};
  void* outputs[] = {out0.data_ptr(), out1.data_ptr()};
  EXPECT_THROW(RunReducing(Kernel(at::kFloat), 4, inputs, outputs, nullptr,
                           {at::kFloat, at::kLong}, {Reduction(1, kBroadcast, 1, 1, {})}),
               c10::Error);
}

INSTANTIATE_TEST_SUITE_P(ReducingLaunch, Dtypes, ::testing::Values(at::kFloat, at::kDouble),
                         [](const auto& info) { return std::string(c10::toString(info.param)); });

}  // namespace
}  // namespace metafuse::runtime
