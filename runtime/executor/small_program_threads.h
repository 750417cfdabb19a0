// One intra-op thread for small programs. A task-batched MAML step over a
// small net (the sinusoid's: tensors of at most 40k elements) is hundreds
// of operations of a few microseconds each. With two threads, ATen splits
// every elementwise operation over 32k elements and the kernels' OpenMP
// regions fork and join, which costs about as much as the work it shares:
// the step measured 7% faster with its operations on one thread. A program
// counts as small when no input and no fused launch exceeds
// kSmallProgramElements elements and it has no convolution (whose outputs
// can be many times its inputs). Decided from the program and its inputs
// before it runs, so every call of a program uses the same thread count
// (reductions give the same bits call after call).
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/ivalue.h>

#include "runtime/program_value/program_code.h"

namespace metafuse::runtime {

inline constexpr int64_t kSmallProgramElements = int64_t{1} << 16;

// What of the decision the code fixes: the largest fused launch, whether a
// convolution or pooling operator runs.
struct ProgramSize {
  int64_t largest_launch = 0;
  bool has_convolution = false;
};
ProgramSize SizeOf(const ProgramCode& code);

// Whether a run of a program of `size` on `inputs` is small.
bool IsSmallRun(const ProgramSize& size, const std::vector<c10::IValue>& inputs);

// Sets this thread's OpenMP thread count (which ATen's CPU operations and
// the compiled kernels read) to 1 while it lives, when `active` and more
// than one thread is set; restores the count after.
class OneThreadScope {
 public:
  explicit OneThreadScope(bool active);
  ~OneThreadScope();
  OneThreadScope(const OneThreadScope&) = delete;
  OneThreadScope& operator=(const OneThreadScope&) = delete;

 private:
  int restore_ = 0;  // 0: nothing to restore
};

}  // namespace metafuse::runtime
