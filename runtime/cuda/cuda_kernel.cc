#include "runtime/cuda/cuda_kernel.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace metafuse::runtime {

absl::StatusOr<unsigned int> GridBlocks(int64_t n, int block_size, int64_t max_blocks) {
  if (block_size <= 0 || max_blocks <= 0 || n < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GridBlocks: expected n >= 0, block_size > 0 and max_blocks > 0; got n = ", n,
        ", block_size = ", block_size, ", max_blocks = ", max_blocks));
  }
  const int64_t blocks = std::max<int64_t>(1, (n + block_size - 1) / block_size);
  return static_cast<unsigned int>(std::min({blocks, max_blocks, int64_t{0x7fffffff}}));
}

absl::StatusOr<std::unique_ptr<CudaKernel>> CudaKernel::Load(const std::string& ptx,
                                                             const std::string& symbol,
                                                             int num_inputs, int num_outputs,
                                                             int num_scalars, int device) {
  auto driver = CudaDriver::Load();
  if (!driver.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA device: ", driver.status().message()));
  }
  const CudaDriver& d = **driver;
  if (device < 0 || device >= d.device_count) {
    return absl::InvalidArgumentError(absl::StrCat("CUDA device ", device, " out of range: ",
                                                   d.device_count, " device(s)"));
  }
  std::unique_ptr<CudaKernel> k(new CudaKernel());
  k->driver_ = &d;
  k->symbol_ = symbol;
  k->num_inputs_ = num_inputs;
  k->num_outputs_ = num_outputs;
  k->num_scalars_ = num_scalars;
  CUdevice dev = 0;
  CUresult r = d.cuDeviceGet(&dev, device);
  if (r == kCudaSuccess) r = d.cuDevicePrimaryCtxRetain(&k->context_, dev);
  if (r == kCudaSuccess) r = d.cuCtxSetCurrent(k->context_);
  if (r != kCudaSuccess) {
    return absl::InternalError(absl::StrCat("could not make CUDA device ", device,
                                            "'s context current: ", d.ErrorString(r)));
  }
  r = d.cuModuleLoadData(&k->module_, ptx.c_str());
  if (r != kCudaSuccess) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuModuleLoadData rejected the PTX of ", symbol, ": ", d.ErrorString(r)));
  }
  r = d.cuModuleGetFunction(&k->function_, k->module_, symbol.c_str());
  if (r != kCudaSuccess) {
    return absl::NotFoundError(
        absl::StrCat("the PTX defines no kernel ", symbol, ": ", d.ErrorString(r)));
  }
  return k;
}

CudaKernel::~CudaKernel() {
  if (module_ != nullptr) driver_->cuModuleUnload(module_);
}

absl::Status CudaKernel::Launch(int64_t n, const std::vector<const void*>& inputs,
                                const std::vector<void*>& outputs,
                                const std::vector<double>& scalars, CUstream stream,
                                int block_size) const {
  if (inputs.size() != static_cast<size_t>(num_inputs_) ||
      outputs.size() != static_cast<size_t>(num_outputs_) ||
      scalars.size() != static_cast<size_t>(num_scalars_)) {
    return absl::InvalidArgumentError(absl::StrCat(
        symbol_, " takes ", num_inputs_, " inputs, ", num_outputs_, " outputs, ", num_scalars_,
        " scalars; got ", inputs.size(), ", ", outputs.size(), ", ", scalars.size()));
  }
  auto blocks = GridBlocks(n, block_size, int64_t{1} << 16);
  if (!blocks.ok()) return blocks.status();
  if (n == 0) return absl::OkStatus();
  // cuLaunchKernel reads each parameter through a pointer to it.
  long long count = n;  // NOLINT: the kernel's `long long n`
  std::vector<void*> params;
  params.push_back(&count);
  std::vector<const void*> in = inputs;
  std::vector<void*> out = outputs;
  std::vector<double> s = scalars;
  for (const void*& p : in) params.push_back(&p);
  for (void*& p : out) params.push_back(&p);
  for (double& v : s) params.push_back(&v);
  // The module lives in the device's primary context; the launching thread
  // (an autograd worker, say) may have another one current.
  CUresult r = driver_->cuCtxSetCurrent(context_);
  if (r == kCudaSuccess) {
    r = driver_->cuLaunchKernel(function_, *blocks, 1, 1, block_size, 1, 1, 0, stream,
                                params.data(), nullptr);
  }
  if (r != kCudaSuccess) {
    return absl::InternalError(
        absl::StrCat("cuLaunchKernel(", symbol_, ") failed: ", driver_->ErrorString(r)));
  }
  return absl::OkStatus();
}

}  // namespace metafuse::runtime
