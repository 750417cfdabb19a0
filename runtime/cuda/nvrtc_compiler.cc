#include "runtime/cuda/nvrtc_compiler.h"

#include <nvrtc.h>

#include "absl/strings/str_cat.h"

namespace metafuse::runtime {
namespace {

// Destroys the program on every return path.
struct ProgramGuard {
  nvrtcProgram program = nullptr;
  ~ProgramGuard() {
    if (program != nullptr) nvrtcDestroyProgram(&program);
  }
};

}  // namespace

absl::StatusOr<std::string> CompileCudaToPtx(const std::string& name,
                                             const std::string& source,
                                             const NvrtcOptions& options) {
  if (options.compute_capability < 50 || options.compute_capability > 200) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NvrtcOptions.compute_capability must be a CUDA compute capability "
        "such as 80 or 90, got ", options.compute_capability));
  }
  ProgramGuard guard;
  nvrtcResult r = nvrtcCreateProgram(&guard.program, source.c_str(),
                                     name.c_str(), 0, nullptr, nullptr);
  if (r != NVRTC_SUCCESS) {
    return absl::InternalError(absl::StrCat("nvrtcCreateProgram failed for '",
                                            name, "': ", nvrtcGetErrorString(r)));
  }
  std::vector<std::string> flags = {
      absl::StrCat("--gpu-architecture=compute_", options.compute_capability),
      "--std=c++17"};
  flags.insert(flags.end(), options.extra_flags.begin(),
               options.extra_flags.end());
  std::vector<const char*> argv;
  for (const std::string& f : flags) argv.push_back(f.c_str());
  r = nvrtcCompileProgram(guard.program, static_cast<int>(argv.size()),
                          argv.data());
  if (r != NVRTC_SUCCESS) {
    size_t log_size = 0;
    nvrtcGetProgramLogSize(guard.program, &log_size);
    std::string log(log_size, '\0');
    if (log_size > 0) nvrtcGetProgramLog(guard.program, log.data());
    return absl::InvalidArgumentError(absl::StrCat(
        "NVRTC could not compile '", name, "' (", nvrtcGetErrorString(r),
        "):\n", log));
  }
  size_t ptx_size = 0;
  r = nvrtcGetPTXSize(guard.program, &ptx_size);
  std::string ptx(ptx_size, '\0');
  if (r == NVRTC_SUCCESS) r = nvrtcGetPTX(guard.program, ptx.data());
  if (r != NVRTC_SUCCESS) {
    return absl::InternalError(absl::StrCat("NVRTC could not return PTX for '",
                                            name, "': ", nvrtcGetErrorString(r)));
  }
  if (!ptx.empty() && ptx.back() == '\0') ptx.pop_back();
  return ptx;
}

std::string NvrtcVersion() {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return "unknown";
  return absl::StrCat(major, ".", minor);
}

}  // namespace metafuse::runtime
