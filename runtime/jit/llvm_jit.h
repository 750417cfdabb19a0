// A thin owner of one LLVM ORC LLJIT instance: LLVM IR text in, host function
// pointers out. The code generator (compiler/) prints kernels as LLVM IR; this
// is where they become native code for the host CPU.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace metafuse::runtime {

// Whether this build has LLVM: false in a build that compiled
// runtime/jit/llvm_jit_unavailable.cc instead of llvm_jit.cc (every LlvmJit
// call then fails, and fused kernels take the C++/OpenMP back end).
bool LlvmAvailable();

// The cache-key parts for LLVM-compiled kernels: the host CPU name and its
// enabled features ("znver3 adx,aes,avx,..."; "" without LLVM), and the code
// generator + LLVM versions.
std::string LlvmHostTarget();
std::string LlvmCodegenVersions();

class LlvmJit {
 public:
  // Creates a JIT for the host CPU (its features enabled, O2 pipeline).
  // Symbols that no module defines (libm's tanhf, expf, ...) resolve to the
  // running process's.
  static absl::StatusOr<std::unique_ptr<LlvmJit>> Create();
  ~LlvmJit();

  // Parses `ir` (textual LLVM IR), optimizes it for the host and adds it to
  // the JIT under `module_name`. Errors name the module and LLVM's diagnostic.
  // If `optimized_ir` is given, it receives the module's IR after the O2
  // pipeline (e.g. to check that a loop vectorized).
  absl::Status AddModule(const std::string& module_name, const std::string& ir,
                         std::string* optimized_ir = nullptr);

  // Adds a relocatable object file (one that ObjectFile returned, possibly in
  // another process on the same host) under `name`.
  absl::Status AddObjectFile(const std::string& name, const std::string& object);

  // The object file LLVM emitted for module `module_name`. Modules compile
  // lazily: call it after a Lookup of one of the module's symbols.
  absl::StatusOr<std::string> ObjectFile(const std::string& module_name) const;

  // Address of a function defined by an added module.
  absl::StatusOr<void*> Lookup(const std::string& symbol);

  // The host as LLVM sees it, e.g. "x86_64-pc-linux-gnu / znver3".
  std::string HostDescription() const;

 private:
  struct Impl;
  explicit LlvmJit(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace metafuse::runtime
