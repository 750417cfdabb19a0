// metafuse::ema_update — the exponential moving average every adaptive
// optimizer keeps (Adam's mu and nu, RMSProp's square average):
//
//   out = decay * moment + (1 - decay) * update^order,   order in {1, 2}
//
// One fused pass over memory forward; an exact closed-form backward written in
// differentiable ATen ops, so gradients of any order are right.
#pragma once

#include <ATen/ATen.h>

namespace metafuse {

// Calls the registered operator through the dispatcher (autograd included).
at::Tensor ema_update(const at::Tensor& moment, const at::Tensor& update,
                      double decay, int64_t order);

}  // namespace metafuse
