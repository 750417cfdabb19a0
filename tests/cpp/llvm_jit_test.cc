#include "runtime/jit/llvm_jit.h"

#include <gtest/gtest.h>

#include <vector>

namespace metafuse::runtime {
namespace {

// An axpy loop in LLVM IR: the shape of kernel the code generator will emit.
constexpr char kAxpyIr[] = R"(
define void @axpy(i64 %n, double %a, double* noalias %x, double* noalias %y) {
entry:
  %empty = icmp eq i64 %n, 0
  br i1 %empty, label %done, label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %loop ]
  %px = getelementptr inbounds double, double* %x, i64 %i
  %py = getelementptr inbounds double, double* %y, i64 %i
  %vx = load double, double* %px
  %vy = load double, double* %py
  %ax = fmul double %a, %vx
  %s = fadd double %ax, %vy
  store double %s, double* %py
  %next = add nuw i64 %i, 1
  %more = icmp ult i64 %next, %n
  br i1 %more, label %loop, label %done
done:
  ret void
}
)";

TEST(LlvmJit, CompilesAndRunsIr) {
  auto jit = LlvmJit::Create();
  ASSERT_TRUE(jit.ok()) << jit.status();
  ASSERT_TRUE((*jit)->AddModule("axpy_module", kAxpyIr).ok());
  auto fn = (*jit)->Lookup("axpy");
  ASSERT_TRUE(fn.ok()) << fn.status();
  auto axpy = reinterpret_cast<void (*)(int64_t, double, double*, double*)>(*fn);
  std::vector<double> x(1003), y(1003);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<double>(i);
    y[i] = 1.0;
  }
  axpy(static_cast<int64_t>(x.size()), 2.0, x.data(), y.data());
  for (size_t i = 0; i < y.size(); ++i) ASSERT_DOUBLE_EQ(y[i], 2.0 * i + 1.0);
  EXPECT_FALSE((*jit)->HostDescription().empty());
}

TEST(LlvmJit, BadIrIsAnErrorNamingTheModule) {
  auto jit = LlvmJit::Create();
  ASSERT_TRUE(jit.ok());
  absl::Status s = (*jit)->AddModule("broken_module", "define void @f( {");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("broken_module"), std::string::npos) << s;
}

TEST(LlvmJit, MissingSymbolIsNotFound) {
  auto jit = LlvmJit::Create();
  ASSERT_TRUE(jit.ok());
  auto fn = (*jit)->Lookup("no_such_function");
  EXPECT_EQ(fn.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace metafuse::runtime
