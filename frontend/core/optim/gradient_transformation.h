// GradientTransformation: the Optax/TorchOpt functional optimizer interface,
// over flat lists of tensors (one entry per parameter leaf).
//
//   state = tx.Init(params)
//   updates = tx.Update(grads, state, &params, /*inplace=*/false)
//   params = ApplyUpdates(params, updates, /*inplace=*/false)
//
// Transforms are composable (Chain) and differentiable: with inplace=false
// every step is built from out-of-place ATen ops, so autograd can trace the
// whole unrolled inner loop back to the meta-parameters. Python binds this
// (metafuse._C._optim) and adds pytree handling; there is no second
// implementation of any transform.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace metafuse::optim {

using TensorList = std::vector<at::Tensor>;

// The state of one transform: a named record whose fields are either aligned
// with the parameters (one tensor per leaf, e.g. Adam's mu) or a single
// tensor (e.g. the step count). Combinators (chain, masked) keep their
// children's states in `children`. Python turns it into a namedtuple pytree.
struct TransformState {
  struct Field {
    std::string name;
    TensorList tensors;
    bool per_param = true;  // false: exactly one tensor, not per leaf
  };
  std::string name;  // e.g. "ScaleByAdamState"
  std::vector<Field> fields;
  std::vector<TransformState> children;

  // The field called `name`; throws naming the state and the field.
  Field& field(const std::string& name);
  const Field& field(const std::string& name) const;
};

class GradientTransformation {
 public:
  virtual ~GradientTransformation() = default;

  // Fresh state for `params` (the leaves of the parameter tree).
  virtual TransformState Init(const TensorList& params) const = 0;

  // Transforms `updates` (gradients at the start of a chain) and advances
  // `state`. `params` is needed by some transforms (weight decay) and may be
  // null otherwise. inplace=true reuses the update and state buffers (fast,
  // not differentiable); inplace=false builds new tensors (differentiable).
  virtual TensorList Update(const TensorList& updates, TransformState& state,
                            const TensorList* params, bool inplace) const = 0;

  // A readable description, e.g. "scale_by_adam(b1=0.9, b2=0.999, ...)".
  virtual std::string Describe() const = 0;
};

using TransformPtr = std::shared_ptr<GradientTransformation>;  // immutable: all methods const

// A hyperparameter that is either a plain number or a tensor (a learned,
// differentiable learning rate, for instance).
struct Hyper {
  double value = 0.0;
  at::Tensor tensor;  // when defined, used instead of `value`
  Hyper(double v) : value(v) {}  // NOLINT: implicit from a number is the point
  Hyper(at::Tensor t) : tensor(std::move(t)) {}  // NOLINT
  bool is_tensor() const { return tensor.defined(); }
  std::string ToString() const;
};

// A schedule maps the step count (0 at the first update) to a number.
using Schedule = std::function<double(int64_t count)>;

// params + updates, leaf by leaf.
TensorList ApplyUpdates(const TensorList& params, const TensorList& updates,
                        bool inplace);

// Checks that `a` and `b` have the same length and that corresponding leaves
// have the same shape; the message names `what_a`, `what_b` and the leaf.
void CheckSameLeaves(const TensorList& a, const TensorList& b,
                     const char* what_a, const char* what_b);

}  // namespace metafuse::optim
