// Small helpers shared by the transform implementations (not public API).
#pragma once

#include <ATen/ATen.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/jit/frontend/tracer.h>

#include "metafuse/optim/gradient_transformation.h"

namespace metafuse::optim::internal {

// The step count lives on the host (a CPU int64 scalar): reading it for bias
// correction never synchronizes a device.
inline at::Tensor NewCount() { return at::zeros({}, at::kLong); }

// The host value of the step count. While the TorchScript tracer records a
// program (metafuse.compile), a count that comes from the program's inputs
// is an error: the traced program would bake in this call's value.
int64_t ReadCount(const TransformState& state);

inline void AdvanceCount(TransformState& state, bool inplace) {
  at::Tensor& count = state.field("count").tensors.at(0);
  count = inplace ? count.add_(1) : count + 1;
}

inline TransformState::Field CountField() {
  return {"count", {NewCount()}, /*per_param=*/false};
}

// A per-parameter field of tensors like `params`, filled with `value`.
inline TransformState::Field FilledLike(const std::string& name,
                                        const TensorList& params, double value,
                                        bool requires_grad) {
  TransformState::Field f{name, {}, true};
  f.tensors.reserve(params.size());
  for (const at::Tensor& p : params) {
    at::Tensor t = at::full_like(p, value, at::MemoryFormat::Preserve);
    if (requires_grad) t.requires_grad_(true);
    f.tensors.push_back(std::move(t));
  }
  return f;
}

// decay * moment + (1 - decay) * x, in place into `moment` or out of place.
inline at::Tensor Ema(at::Tensor& moment, const at::Tensor& x, double decay,
                      bool inplace) {
  if (inplace) return moment.mul_(decay).add_(x, 1.0 - decay);
  moment = moment.mul(decay).add(x, 1.0 - decay);
  return moment;
}

// decay * moment + (1 - decay) * x * x.
inline at::Tensor EmaSquare(at::Tensor& moment, const at::Tensor& x,
                            double decay, bool inplace) {
  if (inplace) return moment.mul_(decay).addcmul_(x, x, 1.0 - decay);
  moment = moment.mul(decay).addcmul(x, x, 1.0 - decay);
  return moment;
}

// sqrt(x) of a moment x >= 0, whose derivative is 0 where x == 0 instead of
// sqrt's inf: x == 0 only where every gradient so far was exactly 0, every
// path from the root back to a gradient then has one-sided limits +-k, and
// 0 is their midpoint (kernels/optim_math.h, RootInverse, says why the
// meta-gradient is then exact; sqrt's inf made it 0 * inf = NaN). The value
// is exactly sqrt(x). Without autograd, and while a capture records the
// operators (the TorchScript tracer, the fx front's dispatch mode), it is
// sqrt itself: the compiler's patterns match sqrt, and its own derivative
// rules give the exact value at zero.
inline at::Tensor RootOfMoment(const at::Tensor& x) {
  if (!at::GradMode::is_enabled() || torch::jit::tracer::isTracing() ||
      c10::impl::dispatch_mode_enabled()) {
    return x.sqrt();
  }
  const at::Tensor mask = (x != 0).to(x.scalar_type());  // NaN stays NaN
  return (x + at::rsub(mask, 1)).sqrt() * mask;
}

// Checks that a per-parameter state field still matches the updates.
void CheckStateMatches(const TransformState& state, const TensorList& updates);

// Validation helpers whose messages name the argument.
void CheckInUnitInterval(double value, const char* name, bool closed_right);
void CheckNonNegative(double value, const char* name);

}  // namespace metafuse::optim::internal
