// LlvmJit for builds without LLVM (the pip route with METAFUSE_WITH_LLVM=0,
// or where no LLVM 14 is installed): the same interface as llvm_jit.cc, but
// Create always fails, so callers take their LLVM-free path (fused CPU
// kernels as C++/OpenMP compiled by the system compiler). No instance can
// exist; the other members are defined only so that callers link.
#include "runtime/jit/llvm_jit.h"

#include "absl/status/status.h"

namespace metafuse::runtime {

namespace {

absl::Status NoLlvm() {
  return absl::UnavailableError(
      "LlvmJit: this metafuse build has no LLVM (built without LLVM 14, or "
      "with METAFUSE_WITH_LLVM=0); fused CPU kernels are compiled as C++ by "
      "the system compiler instead");
}

}  // namespace

bool LlvmAvailable() { return false; }

// No LLVM object code is made or loaded here, so no host target to key it by.
std::string LlvmHostTarget() { return ""; }

std::string LlvmCodegenVersions() { return "metafuse jit_kernel / no LLVM in this build"; }

struct LlvmJit::Impl {};

LlvmJit::LlvmJit(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LlvmJit::~LlvmJit() = default;

absl::StatusOr<std::unique_ptr<LlvmJit>> LlvmJit::Create() { return NoLlvm(); }

absl::Status LlvmJit::AddModule(const std::string&, const std::string&,
                                std::string*) {
  return NoLlvm();
}

absl::Status LlvmJit::AddObjectFile(const std::string&, const std::string&) {
  return NoLlvm();
}

absl::StatusOr<std::string> LlvmJit::ObjectFile(const std::string&) const {
  return NoLlvm();
}

absl::StatusOr<void*> LlvmJit::Lookup(const std::string&) { return NoLlvm(); }

std::string LlvmJit::HostDescription() const { return "no LLVM in this build"; }

}  // namespace metafuse::runtime
