#include "runtime/host_object_code.h"

#include "absl/strings/str_cat.h"
#include "runtime/fused_kernel_launch.h"
#include "runtime/jit_kernel.h"

namespace metafuse::runtime {

void AttachObjectCode(CompiledProgram& program) {
  const std::string target = LlvmHostTarget();
  for (ProgramCode* code : {&program.forward, &program.backward}) {
    for (KernelCode& kernel : code->kernels) {
      if (!kernel.object_code.empty()) continue;
      kernel.object_code = KernelObjectCode(kernel);
      kernel.object_target = target;
    }
  }
}

absl::Status CheckObjectTargets(const CompiledProgram& program) {
  for (const ProgramCode* code : {&program.forward, &program.backward}) {
    for (const KernelCode& kernel : code->kernels) {
      if (kernel.object_code.empty()) continue;
      if (absl::Status s = HostCanRun(kernel.object_target); !s.ok()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "kernel ", kernel.name, " of the ", code->label, " program: ", s.message(),
            "; recompile it on this machine"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace metafuse::runtime
