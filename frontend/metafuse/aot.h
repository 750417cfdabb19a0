// Ahead-of-time artifacts from C++, without Python: load what
// metafuse.aot.save / save_job wrote (Python), inspect it, run it.
//
//   auto job = metafuse::aot::Artifact::Load("sinusoid.mfa");   // all checks
//   if (!job.ok()) { std::cerr << job.status() << "\n"; return 1; }
//   std::vector<at::Tensor> state = job->InitialState();
//   for (int64_t i = 0; i < 100; ++i) {
//     auto step = job->Step(state, i);          // one meta-training step
//     state = std::move(step->state);
//     std::cout << step->metrics.at("loss") << "\n";
//   }
//
// Load verifies, in order: the artifact's signature when it has one and a
// key is given, a complete archive, the artifact format, the LibTorch
// version, the SHA-256 of every member, then every field of the compiled
// program (runtime/program_value/program_serialization.h); a failure names
// the check and says what to do.
//
// Trust (docs/aot.md): the artifact's native code (LLVM object code, C++
// shared objects) runs only when the artifact is trusted: signed with the
// key given (LoadOptions::key, else METAFUSE_ARTIFACT_KEY, hex) or loaded
// with LoadOptions::trust. An untrusted artifact runs its kernels printed
// from their kernel IR (runtime/jit/kernel_ir_rebuild.h), which needs the
// compiler linked (//compiler/codegen:kernel_printer_registration); a
// runtime-only process refuses it, saying how to trust it. A signature the
// key does not verify is an error unless `trust`. A loaded artifact runs its compiled forward
// program: inputs are the flat tensors of the call it was saved for, in the
// order metafuse.tree flattens the arguments; they must have the dtypes,
// devices and shapes it was specialized for.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"

namespace metafuse::runtime {
struct ExecutableProgram;
}

namespace metafuse::aot {

// One step of a job artifact: the next state and the step's metrics.
struct StepResult {
  std::vector<at::Tensor> state;
  std::map<std::string, double> metrics;
};

// How Load decides whether to trust an artifact.
struct LoadOptions {
  // The raw key (at least 16 bytes) to verify the signature with; unset:
  // METAFUSE_ARTIFACT_KEY's (hex) when that is set.
  std::optional<std::string> key;
  // Run the artifact's native code without a verified signature (you trust
  // where it came from).
  bool trust = false;
};

class Artifact {
 public:
  static absl::StatusOr<Artifact> Load(const std::string& path, const LoadOptions& options = {});

  // Whether its native code runs (signed with the key given, or `trust`);
  // and its signature as `metafuse inspect` shows it.
  bool trusted() const { return trusted_; }
  const std::string& signature() const { return signature_; }

  // What it holds: kind, versions, inputs, outputs, the program's
  // instructions, kernels and GEMMs, and the job section, as text.
  std::string Inspect() const;

  // The compiled forward program on `inputs` (flat, without the tensors the
  // function closed over, which the artifact holds). No autograd.
  absl::StatusOr<std::vector<at::Tensor>> Run(const std::vector<at::Tensor>& inputs) const;

  // Job artifacts (metafuse.aot.save_job): step(state, *batch) ->
  // (new_state, metrics), batch i mod count of the stored batches.
  bool is_job() const { return !state_.empty(); }
  const std::vector<at::Tensor>& InitialState() const { return state_; }
  size_t num_batches() const { return batches_.size(); }
  absl::StatusOr<StepResult> Step(const std::vector<at::Tensor>& state, int64_t index) const;

 private:
  Artifact() = default;
  std::string path_, manifest_, signature_;
  bool trusted_ = false;
  std::shared_ptr<const runtime::ExecutableProgram> program_;
  std::vector<at::Tensor> closed_over_, state_;
  std::vector<std::vector<at::Tensor>> batches_;
  std::vector<std::string> metric_names_;
};

}  // namespace metafuse::aot
