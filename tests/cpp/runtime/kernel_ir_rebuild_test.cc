// An untrusted artifact's kernels printed afresh from their kernel IR
// (runtime/jit/kernel_ir_rebuild.h): the native code it carried dropped,
// what it claimed as LLVM IR or CUDA C replaced by the compiler's printing;
// refused, naming the kernel, without kernel IR, with a contract its IR does
// not give, with a name that cannot be printed; refused in a process without
// the compiler.
#include "runtime/jit/kernel_ir_rebuild.h"

#include <gtest/gtest.h>

#include "compiler/codegen/cuda_printer.h"
#include "compiler/codegen/llvm_printer.h"
#include "runtime/jit/kernel_printer_service.h"
#include "tests/cpp/codegen/test_kernels.h"

namespace metafuse::runtime {
namespace {

using codegen::kir::DType;

// A program as an artifact carries it: one host kernel with object code
// (here: bytes that are not code) and LLVM IR that is not the printer's, a
// shared object per program.
CompiledProgram Carried() {
  auto code = codegen::HostKernelCode(codegen::testing::AdamKernel(DType::kF32));
  EXPECT_TRUE(code.ok()) << code.status();
  CompiledProgram p;
  p.forward.label = "forward";
  p.backward.label = "backward";
  KernelCode k = *code;
  k.name = "fused_0";
  k.llvm_ir = "; not what the printer prints\n" + k.llvm_ir;
  k.object_code = "\x7f" "ELF crafted";
  k.object_target = "x86_64 +avx2";
  p.forward.kernels.push_back(k);
  p.forward.shared_object = "\x7f" "ELF crafted library";
  p.forward.shared_object_target = "x86-64-v2";
  return p;
}

void ExpectHas(const absl::Status& s, const std::string& text) {
  EXPECT_NE(s.message().find(text), std::string::npos) << s;
}

TEST(KernelIrRebuild, DropsNativeCodeAndReprintsFromKernelIr) {
  CompiledProgram p = Carried();
  ASSERT_TRUE(RebuildKernelsFromKernelIr(p).ok());
  const KernelCode& k = p.forward.kernels.at(0);
  EXPECT_TRUE(k.object_code.empty());
  EXPECT_TRUE(k.object_target.empty());
  EXPECT_TRUE(p.forward.shared_object.empty());
  EXPECT_TRUE(p.forward.shared_object_target.empty());
  EXPECT_EQ(k.name, "fused_0");
  EXPECT_EQ(k.llvm_ir.find("not what the printer prints"), std::string::npos);
  EXPECT_NE(k.llvm_ir.find("@mf_fused_0("), std::string::npos);
}

TEST(KernelIrRebuild, CudaKernelsAreReprintedAsCuda) {
  auto code = codegen::CudaKernelCode(codegen::testing::AdamKernel(DType::kF32));
  ASSERT_TRUE(code.ok()) << code.status();
  CompiledProgram p;
  KernelCode k = *code;
  k.name = "fused_1";
  k.cuda_source = "extern \"C\" __global__ void mf_fused_1() { /* crafted */ }";
  p.forward.kernels.push_back(k);
  ASSERT_TRUE(RebuildKernelsFromKernelIr(p).ok());
  const KernelCode& got = p.forward.kernels.at(0);
  EXPECT_TRUE(got.llvm_ir.empty());
  EXPECT_EQ(got.cuda_source.find("crafted"), std::string::npos);
  EXPECT_NE(got.cuda_source.find("mf_fused_1("), std::string::npos);
}

TEST(KernelIrRebuild, RefusalsNameTheKernelAndLeaveTheProgram) {
  CompiledProgram p = Carried();
  p.forward.kernels[0].kernel_ir.clear();
  absl::Status s = RebuildKernelsFromKernelIr(p);
  ASSERT_FALSE(s.ok());
  ExpectHas(s, "kernel fused_0 carries no kernel IR");
  EXPECT_FALSE(p.forward.kernels[0].object_code.empty());  // unchanged
  EXPECT_FALSE(p.forward.shared_object.empty());

  p = Carried();
  p.forward.kernels[0].input_dtypes[0] = c10::ScalarType::Double;
  ExpectHas(RebuildKernelsFromKernelIr(p), "kernel fused_0: its launch contract");

  p = Carried();
  p.forward.kernels[0].name = "x(){} void y";
  ExpectHas(RebuildKernelsFromKernelIr(p), "its name is not an identifier");

  p = Carried();
  const std::string ir = p.forward.kernels[0].kernel_ir;
  const size_t colon = ir.find(": f32");
  ASSERT_NE(colon, std::string::npos);
  p.forward.kernels[0].kernel_ir = ir.substr(0, colon) + "*/" + ir.substr(colon);
  ExpectHas(RebuildKernelsFromKernelIr(p), "must be a C identifier");  // the parser's check

  p = Carried();
  p.forward.kernels[0].kernel_ir = "kernel k {\n  nonsense\n}\n";
  ExpectHas(RebuildKernelsFromKernelIr(p), "cannot be printed from its kernel IR");
}

TEST(KernelIrRebuild, ARuntimeOnlyProcessRefusesProgramsWithKernels) {
  UnregisterKernelPrinterServiceForTesting();
  CompiledProgram p = Carried();
  absl::Status s = RebuildKernelsFromKernelIr(p);
  ASSERT_FALSE(s.ok());
  ExpectHas(s, "links only the runtime");
  CompiledProgram none;
  none.forward.shared_object = "x";
  none.forward.shared_object_target = "x86-64";
  EXPECT_TRUE(RebuildKernelsFromKernelIr(none).ok());  // nothing to print
  EXPECT_TRUE(none.forward.shared_object.empty());
}

}  // namespace
}  // namespace metafuse::runtime
