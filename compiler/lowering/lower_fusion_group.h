// Lowering: a metafuse::FusionGroup node (fusion_group.h) with complete
// tensor types (specialize_shapes.h) -> a kernel-IR kernel
// (compiler/codegen/kernel_ir.h) plus how to bind the node's inputs to it.
//
// Each subgraph node becomes scalar ops evaluated at element i of the loop
// shape: broadcasting composes, so a value of a smaller shape is read at the
// index its broadcast maps i to, and expand is the identity. Comparisons
// become the condition of a select (their bool result never leaves the
// kernel); type_as of a float value is a cast (its second operand gives the
// dtype only, whatever its shape).
#pragma once

#include <optional>
#include <vector>

#include <c10/core/ScalarType.h>
#include <torch/csrc/jit/ir/ir.h>

#include "absl/status/statusor.h"
#include "compiler/codegen/kernel_ir.h"

namespace metafuse::compiler {

// How a tensor of `sizes` is read in a loop over `loop` (row-major, its
// broadcast to `loop`): element, broadcast scalar, inner (a trailing block
// repeated) or outer (each element repeated over a trailing block);
// nullopt when the broadcast has none of these forms.
struct BroadcastAccess {
  codegen::kir::Access access = codegen::kir::Access::kElement;
  int64_t inner = 1;
  int64_t mid = 1;
};
std::optional<BroadcastAccess> ClassifyBroadcast(c10::IntArrayRef sizes,
                                                 c10::IntArrayRef loop);

// True if `node` is an elementwise op the lowering handles with the types it
// has (complete, float32/float64, no mixed-dtype arithmetic; comparisons
// yield bool, type_as may cast).
bool IsFusibleNode(const torch::jit::Node* node);

// True for comparison nodes (their bool result may feed only type_as and
// where's condition inside a group).
bool IsFusibleComparison(const torch::jit::Node* node);

struct FusedKernelPlan {
  codegen::kir::Kernel kernel;  // named "fused_<structural hash>"
  std::vector<int64_t> loop_sizes;
  // Per node input: its kernel input number (tensors) or scalar number
  // (numbers), and whether it is a tensor.
  std::vector<int> binding;
  std::vector<bool> is_tensor;
  std::vector<c10::ScalarType> input_dtypes;   // per node input (tensors)
  std::vector<c10::ScalarType> output_dtypes;  // per output of one segment
};

// Lowers one segment of `group`. Errors name the subgraph node that cannot
// be lowered.
absl::StatusOr<FusedKernelPlan> LowerFusionGroup(const torch::jit::Node* group);

// While one is alive on this thread, LowerFusionGroup remembers its results
// by subgraph (groups merged horizontally share theirs), so the passes and
// the runtime that all lower the same groups lower each once.
class ScopedLoweringCache {
 public:
  ScopedLoweringCache();
  ~ScopedLoweringCache();
  ScopedLoweringCache(const ScopedLoweringCache&) = delete;
  ScopedLoweringCache& operator=(const ScopedLoweringCache&) = delete;

 private:
  bool owner_;
};

}  // namespace metafuse::compiler
