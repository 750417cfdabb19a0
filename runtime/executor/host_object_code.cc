#include "runtime/executor/host_object_code.h"

#include "absl/strings/str_cat.h"
#include "runtime/jit/cpp_kernel_library.h"
#include "runtime/executor/fused_kernel_launch.h"
#include "runtime/jit/host_backend.h"
#include "runtime/jit/host_compiler.h"
#include "runtime/jit/jit_kernel.h"

namespace metafuse::runtime {

absl::Status AttachObjectCode(CompiledProgram& program) {
  bool has_kernels = false;
  for (const ProgramCode* code : {&program.forward, &program.backward}) {
    has_kernels = has_kernels || !code->kernels.empty();
  }
  if (!has_kernels) return absl::OkStatus();
  const bool llvm = LlvmAvailable();
  if (llvm) {
    const std::string target = LlvmHostTarget();
    for (ProgramCode* code : {&program.forward, &program.backward}) {
      for (KernelCode& kernel : code->kernels) {
        if (!kernel.object_code.empty()) continue;
        kernel.object_code = KernelObjectCode(kernel);
        kernel.object_target = target;
      }
    }
  }
  auto compiler = FindHostCompiler();
  if (!compiler.ok()) {
    if (llvm) return absl::OkStatus();  // LLVM's object code is enough to run it
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot attach host code: this build has no LLVM and ", compiler.status().message()));
  }
  for (ProgramCode* code : {&program.forward, &program.backward}) {
    if (code->kernels.empty() || !code->shared_object.empty()) continue;
    std::vector<const KernelCode*> kernels;
    for (const KernelCode& k : code->kernels) kernels.push_back(&k);
    auto library = BuildCppKernelLibrary(kernels, ProcessKernelCache());
    if (!library.ok()) {
      return absl::Status(library.status().code(),
                          absl::StrCat("the ", code->label, " program's shared object: ",
                                       library.status().message()));
    }
    code->shared_object = library->bytes;
    code->shared_object_target = library->target;
  }
  return absl::OkStatus();
}

absl::Status CheckObjectTargets(const CompiledProgram& program) {
  auto backend = SelectedHostBackend();
  if (!backend.ok()) return backend.status();
  for (const ProgramCode* code : {&program.forward, &program.backward}) {
    if (code->kernels.empty()) continue;
    if (*backend == HostBackend::kLlvm) {
      for (const KernelCode& kernel : code->kernels) {
        if (kernel.object_code.empty()) continue;
        if (absl::Status s = HostCanRun(kernel.object_target); !s.ok()) {
          return absl::FailedPreconditionError(absl::StrCat(
              "kernel ", kernel.name, " of the ", code->label, " program: ", s.message(),
              "; recompile it on this machine"));
        }
      }
    } else if (!code->shared_object.empty()) {
      if (absl::Status s = CpuCanRun(code->shared_object_target); !s.ok()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the ", code->label, " program: ", s.message(), "; recompile it on this machine"));
      }
    } else if (auto compiler = FindHostCompiler(); !compiler.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the ", code->label, " program carries no shared object for the C++ back end and ",
          compiler.status().message(), "; save it again with a compiler present"));
    }
  }
  return absl::OkStatus();
}

}  // namespace metafuse::runtime
