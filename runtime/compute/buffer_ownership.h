// When an operation may write its result into an argument's buffer.
//
// Buffer planning (compiler/lowering/plan_buffers.h) marks which outputs may take
// which input's buffer; the claim is checked again at run time, here: the
// input is taken only if nothing else holds its tensor or its storage (not a
// view, not held by the caller or a saved value), so a plan can never
// overwrite live data. Fused-kernel launches and accumulating GEMMs ask it.
#pragma once

#include <ATen/core/Tensor.h>

namespace metafuse::runtime {

inline bool BufferIsFree(const at::Tensor& t) {
  return t.use_count() == 1 && t.storage().use_count() == 1 && t.is_contiguous();
}

}  // namespace metafuse::runtime
