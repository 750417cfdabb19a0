// Kernel IR -> CUDA C++ for NVRTC (runtime/cuda/cuda_ptx.h compiles it to PTX,
// runtime/cuda/cuda_kernel.h loads and launches it). The source defines, with C
// linkage,
//   __global__ void mf_<name>(long long n,
//                             const T* in0, ..., const T* in<I-1>,
//                             T* out0, ..., T* out<O-1>,
//                             double scalar0, ..., double scalar<S-1>)
// the same launch contract as the host kernels (runtime/program_value/program_code.h's
// KernelCode): input buffers in kernel order, each read with its access
// pattern (element in[i], broadcast in[0] read once per thread, inner
// in[i % inner], outer in[i / inner]); output buffers written at out[i];
// scalars passed as doubles and rounded to their dtype once per thread. The
// element loop is grid-stride,
//   for (i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
// so any grid, however small, covers [0, n). A horizontally fused launch
// (LaunchPlan::segments) launches the kernel once per segment.
//
// The arithmetic is kir::Interpret's op by op: one rounding per op, exp (and
// sigmoid's exp) is compiler/codegen/kernel_math.h's, printed as a device function
// with the same operations in the same order. Compile with
// runtime::kKernelNvrtcFlags (--fmad=false): NVRTC's default --fmad=true
// contracts a*b+c into one FMA, which changes roundings (1 ulp per
// contraction, more after cancellation). Division and sqrt are IEEE-exact
// under NVRTC's defaults (--prec-div=true --prec-sqrt=true --ftz=false). So
// every output matches the interpreter bit for bit except log, tanh and a
// general pow, which call CUDA's math library instead of the host's libm and
// differ from it within the error bounds CUDA's math API documents.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "compiler/codegen/kernel_ir.h"
#include "runtime/program_value/program_code.h"

namespace metafuse::codegen {

// Part of the PTX cache key: bump it whenever the printed code changes.
inline constexpr char kCudaPrinterVersion[] = "metafuse cuda_printer 2";

// The kernel's entry symbol: "mf_" + name (as on the host).
std::string CudaKernelSymbol(const kir::Kernel& kernel);

// The device functions every printed kernel needs (metafuse's exp in f32 and
// f64); print it once per source.
std::string CudaPrelude();

// One kernel as a __global__ function (validates first). Several kernels
// can be concatenated after one CudaPrelude().
absl::StatusOr<std::string> PrintCudaKernel(const kir::Kernel& kernel);

// CudaPrelude() + PrintCudaKernel(kernel).
absl::StatusOr<std::string> PrintCudaSource(const kir::Kernel& kernel);

// The kernel as a program runs it on CUDA tensors: the launch contract
// (kernel_contract.h) and PrintCudaSource's text in KernelCode::cuda_source.
absl::StatusOr<runtime::KernelCode> CudaKernelCode(const kir::Kernel& kernel);

}  // namespace metafuse::codegen
