#include "runtime/jit/host_backend.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "runtime/jit/llvm_jit.h"
#include "runtime/base/options.h"

namespace metafuse::runtime {

absl::StatusOr<HostBackend> SelectedHostBackend() {
  const std::string chosen = absl::AsciiStrToLower(OptionsFromEnvironment().host_backend);
  if (chosen.empty()) return LlvmAvailable() ? HostBackend::kLlvm : HostBackend::kCpp;
  if (chosen == "cpp") return HostBackend::kCpp;
  if (chosen == "llvm") {
    if (!LlvmAvailable()) {
      return absl::FailedPreconditionError(
          "METAFUSE_HOST_BACKEND=llvm, but this build of metafuse has no LLVM; unset it or "
          "use METAFUSE_HOST_BACKEND=cpp (the system C++ compiler)");
    }
    return HostBackend::kLlvm;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "METAFUSE_HOST_BACKEND='", chosen, "'; expected 'llvm' or 'cpp' (or unset)"));
}

const char* HostBackendName(HostBackend backend) {
  return backend == HostBackend::kLlvm ? "llvm" : "cpp";
}

}  // namespace metafuse::runtime
