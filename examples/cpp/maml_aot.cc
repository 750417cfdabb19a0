// Trains sinusoid MAML from a job artifact that Python wrote
// (examples/sinusoid_maml_job.py, metafuse.aot.save_job), in a process with
// LibTorch and no Python interpreter: each step is one compiled meta-training
// step (inner loops of the meta-batch, query loss, meta-gradient, outer
// update). Prints the meta-loss of every step and whether libpython is mapped
// into the process (it must not be).
//
//   maml_aot JOB.mfa [--steps N] [--inspect] [--key-file PATH] [--trust]
//
// The artifact's native code runs only when it is trusted (docs/aot.md):
// signed with the key in --key-file (hex text), else in METAFUSE_ARTIFACT_KEY
// (hex), or run with --trust. This runner links only the runtime, so it
// cannot print kernels from their kernel IR: it refuses an untrusted
// artifact that has fused kernels, saying how to trust it.
#include <fstream>
#include <iostream>
#include <string>

#include <torch/torch.h>

#include "metafuse/aot.h"
#include "runtime/program_value/artifact_signature.h"

namespace {

bool LibpythonLoaded() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("libpython") != std::string::npos) return true;
  }
  return false;
}

int Usage() {
  std::cerr << "usage: maml_aot JOB.mfa [--steps N] [--inspect] [--key-file PATH] [--trust]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return Usage();
  const std::string path = argv[1];
  int64_t steps = 20;
  bool inspect = false;
  metafuse::aot::LoadOptions options;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--steps" && i + 1 < argc) {
      try {
        steps = std::stoll(argv[++i]);
      } catch (const std::exception&) {
        return Usage();
      }
      if (steps < 0) return Usage();
    } else if (arg == "--inspect") {
      inspect = true;
    } else if (arg == "--key-file" && i + 1 < argc) {
      auto key = metafuse::runtime::ReadArtifactKeyFile(argv[++i]);
      if (!key.ok()) {
        std::cerr << "maml_aot: --key-file: " << key.status().message() << "\n";
        return 2;
      }
      options.key = *std::move(key);
    } else if (arg == "--trust") {
      options.trust = true;
    } else {
      return Usage();
    }
  }
  torch::set_num_threads(1);
  auto job = metafuse::aot::Artifact::Load(path, options);
  if (!job.ok()) {
    std::cerr << "maml_aot: " << job.status().message() << "\n";
    return 1;
  }
  if (inspect) std::cout << job->Inspect();
  if (!job->is_job()) {
    std::cerr << "maml_aot: " << path << " holds a compiled program, not a job\n";
    return 1;
  }
  std::vector<at::Tensor> state = job->InitialState();
  for (int64_t i = 0; i < steps; ++i) {
    auto step = job->Step(state, i);
    if (!step.ok()) {
      std::cerr << "maml_aot: step " << i << ": " << step.status().message() << "\n";
      return 1;
    }
    state = std::move(step->state);
    std::cout << "step " << i;
    for (const auto& [name, value] : step->metrics) {
      std::cout << " " << name << " " << std::setprecision(17) << value;
    }
    std::cout << "\n";
  }
  std::cout << "libpython loaded: " << (LibpythonLoaded() ? "yes" : "no") << "\n";
  return 0;
}
