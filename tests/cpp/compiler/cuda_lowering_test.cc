// The compiler's CUDA decisions without a GPU: graphs whose values carry CUDA
// types (as a trace on CUDA tensors gives them; no CUDA tensor is needed)
// are fused where this build has NVRTC, lowered to kernels with CUDA source
// and no LLVM IR, with GEMMs for their products; the same graph on the CPU
// keeps its host kernels. A program compiled for CUDA refuses CPU tensors
// with a message that says what to do, and survives serialization.
#include <memory>
#include <string>

#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/irparser.h>
#include <torch/torch.h>

#include "compiler/fusion/fuse_elementwise.h"
#include "compiler/lowering/lower_matmul.h"
#include "compiler/lowering/lower_to_program.h"
#include "runtime/executor/kernel_target.h"
#include "runtime/executor/program.h"
#include "runtime/program_value/program_serialization.h"

namespace metafuse::compiler {
namespace {

// y = exp(x @ w) * (x @ w) + 2, every value typed on `device`.
std::shared_ptr<torch::jit::Graph> TypedGraph(const std::string& device) {
  auto type = [&](const std::string& sizes, const std::string& strides) {
    return "Float(" + sizes + ", strides=[" + strides + "], requires_grad=0, device=" +
           device + ")";
  };
  const std::string ir = "graph(%x : " + type("4, 3", "3, 1") + ", %w : " +
                         type("3, 5", "5, 1") + "):\n"
                         "  %two : float = prim::Constant[value=2.]()\n"
                         "  %one : int = prim::Constant[value=1]()\n"
                         "  %m : " + type("4, 5", "5, 1") + " = aten::mm(%x, %w)\n"
                         "  %e : " + type("4, 5", "5, 1") + " = aten::exp(%m)\n"
                         "  %p : " + type("4, 5", "5, 1") + " = aten::mul(%e, %m)\n"
                         "  %y : " + type("4, 5", "5, 1") + " = aten::add(%p, %two, %one)\n"
                         "  return (%y)\n";
  auto graph = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR(ir, graph.get());
  return graph;
}

runtime::ProgramCode Lower(const std::string& device) {
  auto graph = TypedGraph(device);
  EXPECT_EQ(LowerMatmulToGemm(graph), 1) << *graph;
  FuseElementwise(graph);
  return LowerToProgram(*graph, "forward");
}

size_t Count(const runtime::ProgramCode& code, runtime::InstructionKind kind) {
  size_t n = 0;
  for (const auto& ins : code.instructions) n += ins.kind == kind;
  return n;
}

TEST(CudaLowering, CudaGraphGetsCudaKernelsAndAGemm) {
  const runtime::ProgramCode code = Lower("cuda:0");
  EXPECT_EQ(Count(code, runtime::InstructionKind::kGemm), 1u);
  if (!runtime::BuiltKernelBackends().nvrtc) {
    // No NVRTC in this build: CUDA work runs unfused, operator by operator.
    EXPECT_TRUE(code.kernels.empty());
    return;
  }
  ASSERT_EQ(code.kernels.size(), 1u);
  const runtime::KernelCode& k = code.kernels[0];
  EXPECT_TRUE(k.llvm_ir.empty());
  EXPECT_NE(k.cuda_source.find("extern \"C\" __global__ void mf_" + k.name + "("),
            std::string::npos)
      << k.cuda_source;
  EXPECT_FALSE(k.kernel_ir.empty());
  EXPECT_EQ(k.input_dtypes.size(), 1u);  // %m; 2 and 1 are constants
  EXPECT_EQ(Count(code, runtime::InstructionKind::kFusedKernel), 1u);
}

TEST(CudaLowering, CpuGraphKeepsHostKernels) {
  const runtime::ProgramCode code = Lower("cpu");
  ASSERT_EQ(code.kernels.size(), 1u);
  EXPECT_FALSE(code.kernels[0].llvm_ir.empty());
  EXPECT_TRUE(code.kernels[0].cuda_source.empty());
  // Same kernel IR on both devices: only the printed code differs.
  const runtime::ProgramCode cuda = Lower("cuda:0");
  if (!cuda.kernels.empty()) {
    EXPECT_EQ(cuda.kernels[0].kernel_ir, code.kernels[0].kernel_ir);
  }
}

TEST(CudaLowering, CudaProgramRefusesCpuTensorsClearly) {
  if (!runtime::BuiltKernelBackends().nvrtc) GTEST_SKIP() << "this build has no NVRTC";
  // Loading a CUDA program needs no GPU: kernels compile on first launch.
  runtime::Program program(Lower("cuda:0"));
  const auto x = torch::randn({4, 3}), w = torch::randn({3, 5});
  try {
    program.Run({x, w});
    FAIL() << "a CUDA program ran on CPU tensors";
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    EXPECT_NE(what.find("compiled for CUDA tensors"), std::string::npos) << what;
    EXPECT_NE(what.find("on cpu"), std::string::npos) << what;
  }
}

TEST(CudaLowering, CudaSourceSurvivesSerialization) {
  if (!runtime::BuiltKernelBackends().nvrtc) GTEST_SKIP() << "this build has no NVRTC";
  runtime::CompiledProgram p;
  p.forward = Lower("cuda:0");
  p.backward.label = "backward";
  p.num_inputs = 2;
  p.num_outputs = 1;
  p.versions = runtime::CurrentVersions();
  auto back = runtime::DeserializeProgram(runtime::SerializeProgram(p));
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->forward.kernels.size(), 1u);
  EXPECT_EQ(back->forward.kernels[0].cuda_source, p.forward.kernels[0].cuda_source);
  EXPECT_NE(runtime::Dump(*back).find(", CUDA"), std::string::npos);
}

}  // namespace
}  // namespace metafuse::compiler
