#include "metafuse/optim/gradient_transformation.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>

#include <sstream>

namespace metafuse::optim {

TransformState::Field& TransformState::field(const std::string& wanted) {
  for (Field& f : fields) {
    if (f.name == wanted) return f;
  }
  TORCH_CHECK(false, "optimizer state ", name, " has no field '", wanted,
              "': was it created by a different transformation?");
}

const TransformState::Field& TransformState::field(
    const std::string& wanted) const {
  return const_cast<TransformState*>(this)->field(wanted);
}

std::string Hyper::ToString() const {
  if (!is_tensor()) {
    std::ostringstream os;
    os << value;
    return os.str();
  }
  std::ostringstream os;
  os << "Tensor" << tensor.sizes();
  return os.str();
}

void CheckSameLeaves(const TensorList& a, const TensorList& b,
                     const char* what_a, const char* what_b) {
  TORCH_CHECK(a.size() == b.size(), "`", what_a, "` has ", a.size(),
              " leaves but `", what_b, "` has ", b.size(),
              ": they must have the same tree structure");
  for (size_t i = 0; i < a.size(); ++i) {
    TORCH_CHECK(a[i].defined() && b[i].defined(), "leaf ", i, " of `",
                a[i].defined() ? what_b : what_a, "` is not a tensor");
    TORCH_CHECK(a[i].sizes() == b[i].sizes(), "leaf ", i, " of `", what_a,
                "` has shape ", a[i].sizes(), " but leaf ", i, " of `", what_b,
                "` has shape ", b[i].sizes());
  }
}

TensorList ApplyUpdates(const TensorList& params, const TensorList& updates,
                        bool inplace) {
  CheckSameLeaves(params, updates, "params", "updates");
  TensorList out;
  out.reserve(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    if (inplace) {
      // In place on the parameter's data: the optimizer step itself is not
      // part of any graph (torch.optim semantics).
      at::NoGradGuard no_grad;
      out.push_back(params[i].add_(updates[i]));
    } else {
      out.push_back(params[i] + updates[i]);
    }
  }
  return out;
}

}  // namespace metafuse::optim
