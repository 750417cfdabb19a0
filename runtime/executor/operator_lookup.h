// Registered operators by schema: how a program value names the ATen and
// metafuse operators it calls, resolved again in the process that runs it.
#pragma once

#include <string>

#include <ATen/core/stack.h>

namespace metafuse::runtime {

// The operation of the operator whose canonical schema is `schema` (as
// c10::toString(FunctionSchema) prints it). Throws c10::Error when no such
// operator is registered in this process or its schema differs (another
// LibTorch version).
torch::jit::Operation LookUpOperation(const std::string& schema);

}  // namespace metafuse::runtime
