// runtime/executor/small_program_threads: a small program runs its operations on one
// OpenMP thread and restores the count after; a big input, a big fused
// launch or a convolution keeps the threads.
#include "runtime/executor/small_program_threads.h"

#include <gtest/gtest.h>
#include <omp.h>
#include <torch/torch.h>

#include "runtime/executor/program.h"

namespace metafuse::runtime {
namespace {

// relu of the one input: an operator program with no kernels.
ProgramCode ReluProgram() {
  ProgramCode code;
  code.label = "relu";
  code.num_registers = 2;
  code.input_registers = {0};
  code.output_registers = {1};
  InstructionCode ins;
  ins.kind = InstructionKind::kOperator;
  ins.name = "aten::relu";
  ins.schema = "aten::relu(Tensor self) -> Tensor";
  ins.inputs = {0};
  ins.outputs = {1};
  code.instructions.push_back(ins);
  return code;
}

// The OpenMP thread count the program's instructions saw.
int ThreadsInside(const Program& program, const at::Tensor& input) {
  int seen = -1;
  program.Run({input}, [&](size_t, const c10::IValue*, size_t) { seen = omp_get_max_threads(); });
  return seen;
}

class TwoThreads : public ::testing::Test {
 protected:
  void SetUp() override {
    before_ = omp_get_max_threads();
    omp_set_num_threads(2);
  }
  void TearDown() override { omp_set_num_threads(before_); }
  int before_ = 1;
};

TEST_F(TwoThreads, ASmallProgramRunsOnOneThreadAndRestoresTheCount) {
  Program program(ReluProgram());
  EXPECT_EQ(ThreadsInside(program, torch::randn({25, 40, 40})), 1);
  EXPECT_EQ(omp_get_max_threads(), 2);
}

TEST_F(TwoThreads, ABigInputKeepsTheThreads) {
  Program program(ReluProgram());
  EXPECT_EQ(ThreadsInside(program, torch::randn({kSmallProgramElements + 1})), 2);
}

TEST_F(TwoThreads, TheCountComesBackAfterAnError) {
  Program program(ReluProgram());
  EXPECT_THROW(program.Run({c10::IValue(3)}), c10::Error);  // relu of an int
  EXPECT_EQ(omp_get_max_threads(), 2);
}

TEST(ProgramSize, ConvolutionsAndBigLaunchesAreNotSmall) {
  ProgramCode code = ReluProgram();
  const std::vector<c10::IValue> small_input{torch::zeros({8})};
  EXPECT_TRUE(IsSmallRun(SizeOf(code), small_input));
  LaunchPlan launch;
  launch.numel = {100, kSmallProgramElements + 1};
  code.launches.push_back(launch);
  EXPECT_EQ(SizeOf(code).largest_launch, kSmallProgramElements + 1);
  EXPECT_FALSE(IsSmallRun(SizeOf(code), small_input));
  code = ReluProgram();
  code.instructions[0].schema =
      "aten::conv2d(Tensor input, Tensor weight, Tensor? bias=None, int[2] stride=1, "
      "int[2] padding=0, int[2] dilation=1, int groups=1) -> Tensor";
  EXPECT_TRUE(SizeOf(code).has_convolution);
  EXPECT_FALSE(IsSmallRun(SizeOf(code), small_input));
}

TEST(OneThreadScope, DoesNothingWhenInactiveOrAlreadyOneThread) {
  const int before = omp_get_max_threads();
  omp_set_num_threads(3);
  {
    OneThreadScope inactive(false);
    EXPECT_EQ(omp_get_max_threads(), 3);
  }
  omp_set_num_threads(1);
  {
    OneThreadScope one(true);
    EXPECT_EQ(omp_get_max_threads(), 1);
  }
  EXPECT_EQ(omp_get_max_threads(), 1);
  omp_set_num_threads(before);
}

}  // namespace
}  // namespace metafuse::runtime
