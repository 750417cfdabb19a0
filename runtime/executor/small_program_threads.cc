#include "runtime/executor/small_program_threads.h"

#include <omp.h>

#include <algorithm>
#include <string>

namespace metafuse::runtime {

ProgramSize SizeOf(const ProgramCode& code) {
  ProgramSize size;
  for (const LaunchPlan& plan : code.launches) {
    for (int64_t n : plan.numel) size.largest_launch = std::max(size.largest_launch, n);
  }
  for (const InstructionCode& ins : code.instructions) {
    if (ins.kind != InstructionKind::kOperator) continue;
    for (const char* name : {"aten::conv", "aten::_conv", "aten::cudnn", "aten::mkldnn",
                             "aten::max_pool", "aten::avg_pool", "aten::adaptive_"}) {
      if (ins.schema.rfind(name, 0) == 0) size.has_convolution = true;
    }
  }
  return size;
}

bool IsSmallRun(const ProgramSize& size, const std::vector<c10::IValue>& inputs) {
  if (size.has_convolution || size.largest_launch > kSmallProgramElements) return false;
  for (const c10::IValue& v : inputs) {
    if (!v.isTensor()) continue;
    const at::Tensor& t = v.toTensor();
    if (t.defined() && (!t.is_cpu() || t.numel() > kSmallProgramElements)) return false;
  }
  return true;
}

OneThreadScope::OneThreadScope(bool active) {
  if (!active) return;
  const int threads = omp_get_max_threads();
  if (threads <= 1) return;
  restore_ = threads;
  omp_set_num_threads(1);
}

OneThreadScope::~OneThreadScope() {
  if (restore_ > 0) omp_set_num_threads(restore_);
}

}  // namespace metafuse::runtime
