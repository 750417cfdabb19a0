// CUDA C++ source -> PTX with NVRTC, in process. Needs the CUDA toolkit at
// build time (it links libnvrtc) but no GPU: PTX for any architecture can be
// produced on a CPU-only machine and loaded later through CudaDriver.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace metafuse::runtime {

struct NvrtcOptions {
  int compute_capability = 80;  // e.g. 90 -> --gpu-architecture=compute_90
  std::vector<std::string> extra_flags;  // e.g. "-default-device"
};

// Compiles `source` (named `name` in diagnostics) to PTX. On failure the
// error carries NVRTC's full compile log.
absl::StatusOr<std::string> CompileCudaToPtx(const std::string& name,
                                             const std::string& source,
                                             const NvrtcOptions& options = {});

// NVRTC's version as "major.minor".
std::string NvrtcVersion();

}  // namespace metafuse::runtime
