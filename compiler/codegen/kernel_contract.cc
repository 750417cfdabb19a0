#include "compiler/codegen/kernel_contract.h"

namespace metafuse::codegen {

runtime::KernelCode KernelContract(const kir::Kernel& kernel) {
  auto dtype = [](kir::DType t) {
    return t == kir::DType::kF32 ? c10::ScalarType::Float : c10::ScalarType::Double;
  };
  runtime::KernelCode code;
  code.name = kernel.name;
  code.kernel_ir = kir::Print(kernel);
  for (const kir::InputSpec& in : kernel.inputs) {
    code.input_dtypes.push_back(dtype(in.dtype));
    code.input_access.push_back(static_cast<int64_t>(in.access));
    code.input_inner.push_back(in.inner);
    code.input_mid.push_back(in.mid);
    code.input_names.push_back(in.name);
  }
  for (const kir::OutputSpec& out : kernel.outputs) {
    code.output_dtypes.push_back(dtype(kernel.nodes[out.node].dtype));
    code.output_names.push_back(out.name);
  }
  code.num_scalars = static_cast<int64_t>(kernel.scalars.size());
  return code;
}

}  // namespace metafuse::codegen
