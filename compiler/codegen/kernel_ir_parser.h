// Reads kir::Print's text back into a kernel: what a compiled program keeps
// of each fused kernel (runtime::KernelCode::kernel_ir) becomes a kernel
// again, so that another printer (compiler/codegen/cuda_printer.h) can retarget it.
// Parse(Print(k)) is k (names, nodes, constants bit for bit).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "compiler/codegen/kernel_ir.h"

namespace metafuse::codegen::kir {

// The kernel `text` describes, validated. Errors name the line and what was
// expected there.
absl::StatusOr<Kernel> Parse(const std::string& text);

}  // namespace metafuse::codegen::kir
