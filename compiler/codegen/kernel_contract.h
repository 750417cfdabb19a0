// The part of a runtime KernelCode (runtime/program_value/program_code.h) every target
// shares: name, kernel IR text and the launch contract (per input dtype,
// access pattern and inner size, per output dtype, the scalar count, names).
// Each printer adds its own code: HostKernelCode (llvm_printer.h) the LLVM
// module, CudaKernelCode (cuda_printer.h) the CUDA source.
#pragma once

#include "compiler/codegen/kernel_ir.h"
#include "runtime/program_value/program_code.h"

namespace metafuse::codegen {

runtime::KernelCode KernelContract(const kir::Kernel& kernel);

}  // namespace metafuse::codegen
