// Pytrees of torch::IValue for C++ users: Tensors (and every other
// non-container value) are leaves; Tuple, List, GenericDict and None are
// nodes (None a leaf with none_is_leaf), as are registered C++ classes
// (ivalue_registry.h). Dict keys (str/int/float/bool) are visited in sorted
// order, as on the Python side. Errors come back as absl::Status whose
// message names the path (e.g. tree[1]['w']) and what each side has there.
#pragma once

#include <functional>
#include <vector>

#include <ATen/core/ivalue.h>

#include "absl/status/statusor.h"
#include "tree/tree_spec.h"

namespace metafuse::tree {

struct FlatIValue {
  std::vector<c10::IValue> leaves;
  TreeSpecPtr spec;
  // FlattenWithPath only: per leaf, the dict keys and indices leading to it.
  std::vector<std::vector<Literal>> paths;
};

absl::StatusOr<FlatIValue> Flatten(const c10::IValue& tree,
                                   bool none_is_leaf = false);
absl::StatusOr<FlatIValue> FlattenWithPath(const c10::IValue& tree,
                                           bool none_is_leaf = false);
// The leaves of `tree`, after checking that it has exactly `spec`'s shape.
absl::StatusOr<std::vector<c10::IValue>> FlattenAs(const TreeSpec& spec,
                                                   const c10::IValue& tree);
absl::StatusOr<c10::IValue> Unflatten(const TreeSpec& spec,
                                      std::vector<c10::IValue> leaves);
absl::StatusOr<std::vector<c10::IValue>> Leaves(const c10::IValue& tree,
                                                bool none_is_leaf = false);
absl::StatusOr<TreeSpecPtr> Structure(const c10::IValue& tree,
                                      bool none_is_leaf = false);

// n-ary map: fn receives the i-th leaf of every tree; all trees must have
// the first one's structure.
using IValueMapFn =
    std::function<c10::IValue(const std::vector<c10::IValue>& leaves)>;
absl::StatusOr<c10::IValue> Map(const IValueMapFn& fn,
                                const std::vector<c10::IValue>& trees,
                                bool none_is_leaf = false);
// The same walk for the effect (e.g. in-place tensor updates).
using IValueVisitFn = std::function<void(const std::vector<c10::IValue>& leaves)>;
absl::Status MapInplace(const IValueVisitFn& fn, const std::vector<c10::IValue>& trees,
                        bool none_is_leaf = false);

// Arithmetic over matching trees whose leaves are all tensors.
absl::StatusOr<c10::IValue> Add(const c10::IValue& a, const c10::IValue& b,
                                const at::Scalar& alpha = 1);
absl::StatusOr<c10::IValue> Sub(const c10::IValue& a, const c10::IValue& b,
                                const at::Scalar& alpha = 1);
absl::StatusOr<c10::IValue> ScalarMul(const at::Scalar& scalar,
                                      const c10::IValue& a);
absl::StatusOr<at::Tensor> Vdot(const c10::IValue& a, const c10::IValue& b);

}  // namespace metafuse::tree
