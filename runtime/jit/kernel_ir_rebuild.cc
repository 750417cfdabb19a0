#include "runtime/jit/kernel_ir_rebuild.h"

#include "absl/strings/str_cat.h"
#include "runtime/jit/kernel_printer_service.h"

namespace metafuse::runtime {
namespace {

bool SameContract(const KernelCode& a, const KernelCode& b) {
  return a.input_dtypes == b.input_dtypes && a.input_access == b.input_access &&
         a.input_inner == b.input_inner && a.input_mid == b.input_mid &&
         a.output_dtypes == b.output_dtypes && a.num_scalars == b.num_scalars;
}

absl::StatusOr<KernelCode> Reprint(const KernelPrinterService& service, const KernelCode& code) {
  if (code.kernel_ir.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "kernel ", code.name, " carries no kernel IR, so it can run only from the native code "
        "the artifact carries"));
  }
  const bool cuda = code.llvm_ir.empty();
  if (cuda && code.cuda_source.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("kernel ", code.name, " has neither LLVM IR nor CUDA source"));
  }
  auto fresh = service.print_kernel_code(code.name, code.kernel_ir, cuda);
  if (!fresh.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel ", code.name, " cannot be printed from its kernel IR: ", fresh.status().message()));
  }
  if (!SameContract(*fresh, code)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel ", code.name, ": its launch contract (dtypes, access, sizes, scalars) differs "
        "from the one its kernel IR gives"));
  }
  fresh->name = code.name;
  return fresh;  // no object code, no object target
}

}  // namespace

absl::Status RebuildKernelsFromKernelIr(CompiledProgram& program) {
  if (program.forward.kernels.empty() && program.backward.kernels.empty()) {
    program.forward.shared_object.clear();
    program.forward.shared_object_target.clear();
    program.backward.shared_object.clear();
    program.backward.shared_object_target.clear();
    return absl::OkStatus();
  }
  auto service = GetKernelPrinterService("running an artifact's kernels from their kernel IR");
  if (!service.ok() || !(*service)->print_kernel_code) {
    return absl::FailedPreconditionError(
        "printing kernels from their kernel IR needs metafuse's compiler, and this process "
        "links only the runtime (a process that links "
        "//compiler/codegen:kernel_printer_registration can)");
  }
  CompiledProgram rebuilt = program;
  for (ProgramCode* code : {&rebuilt.forward, &rebuilt.backward}) {
    for (KernelCode& kernel : code->kernels) {
      auto fresh = Reprint(**service, kernel);
      if (!fresh.ok()) return fresh.status();
      kernel = *std::move(fresh);
    }
    code->shared_object.clear();
    code->shared_object_target.clear();
  }
  program = std::move(rebuilt);
  return absl::OkStatus();
}

}  // namespace metafuse::runtime
