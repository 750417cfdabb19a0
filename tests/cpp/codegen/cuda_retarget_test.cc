// Retargeting compiled programs to CUDA: every fused kernel of the test
// programs (MAML-style inner loops compiled by the pipeline, forward and
// meta-backward) is read back from its KernelCode::kernel_ir text, printed
// as CUDA, compiled to PTX by NVRTC, and run over a grid on the CPU through
// the host shim against the interpreter (bit for bit). No GPU needed.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "compiler/codegen/kernel_ir_parser.h"
#include "compiler/callable/compiled_inner_loop.h"
#include "runtime/cuda/cuda_ptx.h"
#include "runtime/cuda/nvrtc_compiler.h"
#include "tests/cpp/codegen/cuda_host_run.h"

namespace metafuse::codegen {
namespace {

using TensorList = std::vector<at::Tensor>;

TensorList MlpParams() {
  return {torch::randn({40, 1}), torch::randn({40}), torch::randn({40, 40}) * 0.1,
          torch::randn({40}), torch::randn({1, 40}) * 0.1, torch::randn({1})};
}

at::Tensor ReluMlpLoss(const TensorList& p, const TensorList& b) {
  auto h = torch::relu(torch::linear(b[0], p[0], p[1]));
  h = torch::relu(torch::linear(h, p[2], p[3]));
  return torch::mse_loss(torch::linear(h, p[4], p[5]), b[1]);
}

at::Tensor SmoothMlpLoss(const TensorList& p, const TensorList& b) {
  auto h = torch::tanh(torch::linear(b[0], p[0], p[1]));
  h = torch::sigmoid(torch::linear(h, p[2], p[3]));
  return torch::mse_loss(torch::linear(h, p[4], p[5]), b[1]);
}

// The fused kernels of one compiled inner loop's program, forward and
// backward, parsed back from their IR text.
std::vector<kir::Kernel> ProgramKernels(const compiler::LossFunction& loss, const char* kind,
                                        int64_t steps) {
  torch::manual_seed(3);
  TensorList params = MlpParams();
  for (auto& p : params) p.requires_grad_(true);
  auto x = torch::rand({10, 1}) * 10 - 5;
  const TensorList batch = {x, torch::sin(x)};
  compiler::OptimizerSpec opt;
  opt.kind = kind;
  opt.lr = 0.01;
  auto loop = compiler::CompileInnerLoop(loss, params, batch, opt, steps);
  TensorList inputs = params;
  inputs.insert(inputs.end(), batch.begin(), batch.end());
  const runtime::CompiledProgram program = loop->function().ProgramFor(inputs);
  std::vector<kir::Kernel> kernels;
  for (const runtime::ProgramCode* code : {&program.forward, &program.backward}) {
    for (const runtime::KernelCode& kc : code->kernels) {
      auto k = kir::Parse(kc.kernel_ir);
      EXPECT_TRUE(k.ok()) << k.status() << "\n" << kc.kernel_ir;
      if (!k.ok()) continue;
      EXPECT_EQ(CudaKernelSymbol(*k), "mf_" + kc.name);
      EXPECT_EQ(kir::Print(*k), kc.kernel_ir);
      kernels.push_back(*std::move(k));
    }
  }
  return kernels;
}

std::vector<kir::Kernel> TestProgramKernels() {
  std::vector<kir::Kernel> all;
  for (auto [loss, kind] : {std::pair{&ReluMlpLoss, "sgd"}, std::pair{&SmoothMlpLoss, "adam"},
                            std::pair{&SmoothMlpLoss, "adamw"}}) {
    for (kir::Kernel& k : ProgramKernels(loss, kind, 3)) {
      // Programs share kernels (same structure, same name): keep one each.
      bool seen = false;
      for (const kir::Kernel& have : all) seen |= have.name == k.name;
      if (!seen) all.push_back(std::move(k));
    }
  }
  return all;
}

TEST(CudaRetarget, EveryProgramKernelCompilesToPtxAndMatchesOnTheHostShim) {
  const std::vector<kir::Kernel> kernels = TestProgramKernels();
  ASSERT_GE(kernels.size(), 3u) << "the test programs should have fused kernels";
  std::cout << kernels.size() << " distinct fused kernels in the test programs\n";
  const std::string source = testing::CombinedCudaSource(kernels);
  runtime::NvrtcOptions options;
  options.compute_capability = 90;
  options.extra_flags = runtime::KernelNvrtcFlags();
  auto ptx = runtime::CompileCudaToPtx("program_kernels.cu", source, options);
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  for (const kir::Kernel& k : kernels) {
    EXPECT_TRUE(runtime::VerifyPtx(*ptx, CudaKernelSymbol(k), 90).ok()) << k.name;
  }
  testing::ExpectHostShimGridRunsMatchInterpreter(kernels);
}

}  // namespace
}  // namespace metafuse::codegen
