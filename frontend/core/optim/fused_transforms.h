// Whole optimizers as one GradientTransformation each, whose update is one
// call of a multi-tensor fused operator from kernels/ (one parallel pass over
// all parameters; exact closed-form backward, differentiable to any order).
// The aliases route here when their options say `fused`.
#pragma once

#include "metafuse/optim/alias.h"

namespace metafuse::optim {

TransformPtr FusedSgd(const SgdOptions& o);
TransformPtr FusedAdam(const AdamOptions& o, bool decoupled_weight_decay);
TransformPtr FusedAdamax(const AdamaxOptions& o);
TransformPtr FusedRAdam(const RAdamOptions& o);
TransformPtr FusedAdadelta(const AdadeltaOptions& o);
TransformPtr FusedAdagrad(const AdagradOptions& o);
TransformPtr FusedRmsProp(const RmsPropOptions& o);

}  // namespace metafuse::optim
