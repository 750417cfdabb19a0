// Stateless transforms, momentum and the combinators.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <unordered_set>

#include <torch/csrc/jit/frontend/tracer.h>
#include <torch/csrc/jit/ir/ir.h>

#include "metafuse/optim/state_helpers.h"
#include "metafuse/optim/transforms.h"

namespace metafuse::optim {
namespace internal {

namespace {

bool DependsOnGraphInputs(torch::jit::Value* v,
                          std::unordered_set<torch::jit::Value*>& seen) {
  if (!seen.insert(v).second) return false;
  if (v->node()->kind() == torch::jit::prim::Param) return true;
  for (torch::jit::Value* in : v->node()->inputs()) {
    if (DependsOnGraphInputs(in, seen)) return true;
  }
  return false;
}

}  // namespace

int64_t ReadCount(const TransformState& state) {
  const at::Tensor& count = state.field("count").tensors.at(0);
  if (torch::jit::tracer::isTracing()) {
    std::unordered_set<torch::jit::Value*> seen;
    TORCH_CHECK(!DependsOnGraphInputs(torch::jit::tracer::getValueTrace(count), seen),
                "optimizer state ", state.name, ".count comes from the traced "
                "function's inputs: its value would be baked into the program. "
                "Create the optimizer state inside the compiled function.");
  }
  return count.item<int64_t>();
}

void CheckStateMatches(const TransformState& state, const TensorList& updates) {
  for (const auto& f : state.fields) {
    if (!f.per_param) continue;
    TORCH_CHECK(f.tensors.size() == updates.size(), "optimizer state ",
                state.name, ".", f.name, " has ", f.tensors.size(),
                " leaves but the updates have ", updates.size(),
                ": state and updates must have the same tree structure");
    for (size_t i = 0; i < updates.size(); ++i) {
      TORCH_CHECK(f.tensors[i].sizes() == updates[i].sizes(),
                  "optimizer state ", state.name, ".", f.name, " leaf ", i,
                  " has shape ", f.tensors[i].sizes(),
                  " but the update has shape ", updates[i].sizes());
    }
  }
}

void CheckInUnitInterval(double value, const char* name, bool closed_right) {
  TORCH_CHECK(value >= 0.0 && (closed_right ? value <= 1.0 : value < 1.0),
              "`", name, "` must be in [0, 1", closed_right ? "]" : ")",
              ", got ", value);
}

void CheckNonNegative(double value, const char* name) {
  TORCH_CHECK(value >= 0.0, "`", name, "` must be >= 0, got ", value);
}

}  // namespace internal

namespace {

using internal::CheckStateMatches;

TransformState EmptyState() { return {"EmptyState", {}, {}}; }

// The base of transforms that keep no state.
class Stateless : public GradientTransformation {
 public:
  TransformState Init(const TensorList&) const override { return EmptyState(); }
};

at::Tensor Times(const at::Tensor& u, const Hyper& h, bool inplace) {
  if (h.is_tensor()) return inplace ? u.mul_(h.tensor) : u * h.tensor;
  return inplace ? u.mul_(h.value) : u * h.value;
}

class ScaleTx final : public Stateless {
 public:
  explicit ScaleTx(Hyper step) : step_(std::move(step)) {}
  TensorList Update(const TensorList& updates, TransformState&,
                    const TensorList*, bool inplace) const override {
    TensorList out;
    out.reserve(updates.size());
    for (const at::Tensor& u : updates) out.push_back(Times(u, step_, inplace));
    return out;
  }
  std::string Describe() const override {
    return "scale(" + step_.ToString() + ")";
  }

 private:
  Hyper step_;
};

class ScalePerLeafTx final : public Stateless {
 public:
  explicit ScalePerLeafTx(TensorList factors) : factors_(std::move(factors)) {}
  TensorList Update(const TensorList& updates, TransformState&,
                    const TensorList*, bool inplace) const override {
    TORCH_CHECK(updates.size() == factors_.size(), "scale_per_leaf: ",
                factors_.size(), " factors for ", updates.size(),
                " update leaves: they must have the same tree structure");
    TensorList out;
    out.reserve(updates.size());
    for (size_t i = 0; i < updates.size(); ++i) {
      out.push_back(inplace ? updates[i].mul_(factors_[i])
                            : updates[i] * factors_[i]);
    }
    return out;
  }
  std::string Describe() const override { return "scale_per_leaf"; }

 private:
  TensorList factors_;
};

class ScaleByScheduleTx final : public GradientTransformation {
 public:
  ScaleByScheduleTx(Schedule schedule, std::string description)
      : schedule_(std::move(schedule)), description_(std::move(description)) {}
  TransformState Init(const TensorList&) const override {
    return {"ScaleByScheduleState", {internal::CountField()}, {}};
  }
  TensorList Update(const TensorList& updates, TransformState& state,
                    const TensorList*, bool inplace) const override {
    const double factor = schedule_(internal::ReadCount(state));
    TensorList out;
    out.reserve(updates.size());
    for (const at::Tensor& u : updates) {
      out.push_back(inplace ? u.mul_(factor) : u * factor);
    }
    internal::AdvanceCount(state, inplace);
    return out;
  }
  std::string Describe() const override {
    return "scale_by_schedule(" + description_ + ")";
  }

 private:
  Schedule schedule_;
  std::string description_;
};

class TraceTx final : public GradientTransformation {
 public:
  TraceTx(double momentum, double dampening, bool nesterov, bool requires_grad)
      : momentum_(momentum),
        dampening_(dampening),
        nesterov_(nesterov),
        requires_grad_(requires_grad) {}
  TransformState Init(const TensorList& params) const override {
    return {"TraceState",
            {internal::FilledLike("trace", params, 0.0, requires_grad_),
             internal::CountField()},
            {}};
  }
  TensorList Update(const TensorList& updates, TransformState& state,
                    const TensorList*, bool inplace) const override {
    CheckStateMatches(state, updates);
    const bool first = internal::ReadCount(state) == 0;
    TensorList& trace = state.field("trace").tensors;
    TensorList out;
    out.reserve(updates.size());
    for (size_t i = 0; i < updates.size(); ++i) {
      const at::Tensor& g = updates[i];
      at::Tensor& buf = trace[i];
      // torch.optim.SGD: the first buffer is the update itself, undamped.
      if (first) {
        buf = inplace ? buf.copy_(g) : g;
      } else if (inplace) {
        buf.mul_(momentum_).add_(g, 1.0 - dampening_);
      } else {
        buf = buf.mul(momentum_).add(g, 1.0 - dampening_);
      }
      if (nesterov_) {
        out.push_back(inplace ? g.add_(buf, momentum_) : g.add(buf, momentum_));
      } else {
        out.push_back(inplace ? g.copy_(buf) : buf);
      }
    }
    internal::AdvanceCount(state, inplace);
    return out;
  }
  std::string Describe() const override {
    std::ostringstream os;
    os << "trace(momentum=" << momentum_ << ", dampening=" << dampening_
       << ", nesterov=" << (nesterov_ ? "true" : "false") << ")";
    return os.str();
  }

 private:
  double momentum_, dampening_;
  bool nesterov_, requires_grad_;
};

class AddDecayedWeightsTx final : public Stateless {
 public:
  AddDecayedWeightsTx(double wd, std::vector<bool> mask)
      : wd_(wd), mask_(std::move(mask)) {}
  TensorList Update(const TensorList& updates, TransformState&,
                    const TensorList* params, bool inplace) const override {
    if (wd_ == 0.0) return updates;
    TORCH_CHECK(params != nullptr,
                "add_decayed_weights needs `params` to be passed to update() "
                "(weight_decay=", wd_, ")");
    CheckSameLeaves(*params, updates, "params", "updates");
    TORCH_CHECK(mask_.empty() || mask_.size() == updates.size(),
                "add_decayed_weights: `mask` has ", mask_.size(),
                " leaves but the updates have ", updates.size());
    TensorList out;
    out.reserve(updates.size());
    for (size_t i = 0; i < updates.size(); ++i) {
      if (!mask_.empty() && !mask_[i]) {
        out.push_back(updates[i]);
      } else {
        // In place on an update that does not require grad (a gradient,
        // possibly a view made by autograd in no-grad mode), the parameter
        // enters as data only: TorchOpt's semantics, and no "view modified
        // in place" error when the parameter requires grad.
        const at::Tensor& p = (*params)[i];
        out.push_back(inplace ? updates[i].add_(updates[i].requires_grad()
                                                    ? p
                                                    : p.detach(),
                                                wd_)
                              : updates[i].add(p, wd_));
      }
    }
    return out;
  }
  std::string Describe() const override {
    std::ostringstream os;
    os << "add_decayed_weights(" << wd_ << ")";
    return os.str();
  }

 private:
  double wd_;
  std::vector<bool> mask_;
};

template <typename T>
std::vector<T> Select(const std::vector<T>& all, const std::vector<bool>& mask) {
  std::vector<T> out;
  for (size_t i = 0; i < all.size(); ++i) {
    if (mask[i]) out.push_back(all[i]);
  }
  return out;
}

class MaskedTx final : public GradientTransformation {
 public:
  MaskedTx(TransformPtr inner, std::vector<bool> mask)
      : inner_(std::move(inner)), mask_(std::move(mask)) {}
  TransformState Init(const TensorList& params) const override {
    CheckMask(params.size());
    return {"MaskedState", {}, {inner_->Init(Select(params, mask_))}};
  }
  TensorList Update(const TensorList& updates, TransformState& state,
                    const TensorList* params, bool inplace) const override {
    CheckMask(updates.size());
    TensorList selected_params;
    if (params != nullptr) selected_params = Select(*params, mask_);
    TensorList inner_out =
        inner_->Update(Select(updates, mask_), state.children.at(0),
                       params ? &selected_params : nullptr, inplace);
    TensorList out = updates;
    size_t k = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      if (mask_[i]) out[i] = inner_out[k++];
    }
    return out;
  }
  std::string Describe() const override {
    return "masked(" + inner_->Describe() + ")";
  }

 private:
  void CheckMask(size_t n) const {
    TORCH_CHECK(mask_.size() == n, "masked: `mask` has ", mask_.size(),
                " leaves but the parameters have ", n,
                ": the mask must have the parameters' tree structure");
  }
  TransformPtr inner_;
  std::vector<bool> mask_;
};

class NanToNumTx final : public Stateless {
 public:
  NanToNumTx(double nan, c10::optional<double> posinf,
             c10::optional<double> neginf)
      : nan_(nan), posinf_(posinf), neginf_(neginf) {}
  TensorList Update(const TensorList& updates, TransformState&,
                    const TensorList*, bool inplace) const override {
    TensorList out;
    out.reserve(updates.size());
    for (const at::Tensor& u : updates) {
      out.push_back(inplace ? u.nan_to_num_(nan_, posinf_, neginf_)
                            : u.nan_to_num(nan_, posinf_, neginf_));
    }
    return out;
  }
  std::string Describe() const override { return "nan_to_num"; }

 private:
  double nan_;
  c10::optional<double> posinf_, neginf_;
};

class ClipGradNormTx final : public Stateless {
 public:
  ClipGradNormTx(double max_norm, double norm_type, bool error_if_nonfinite)
      : max_norm_(max_norm),
        norm_type_(norm_type),
        error_if_nonfinite_(error_if_nonfinite) {}
  TensorList Update(const TensorList& updates, TransformState&,
                    const TensorList*, bool inplace) const override {
    if (updates.empty()) return updates;
    // The norm is a constant for autograd (torch.nn.utils.clip_grad_norm_
    // and TorchOpt): gradients flow through the scaling only. The
    // coefficient stays a tensor (no device synchronization, traceable).
    at::Tensor coef;
    {
      at::NoGradGuard no_grad;
      at::Tensor total;
      if (std::isinf(norm_type_)) {
        TensorList maxima;
        for (const at::Tensor& u : updates) maxima.push_back(u.abs().max());
        total = at::stack(maxima).max();
      } else {
        TensorList norms;
        for (const at::Tensor& u : updates) norms.push_back(u.norm(norm_type_));
        total = at::stack(norms).norm(norm_type_);
      }
      if (error_if_nonfinite_) {
        const double norm = total.item<double>();
        TORCH_CHECK(std::isfinite(norm), "clip_grad_norm: the total norm of "
                    "order ", norm_type_, " of the updates is non-finite (",
                    norm, "), so it cannot be clipped; pass "
                    "error_if_nonfinite=False to scale by it anyway");
      }
      // torch.nn.utils.clip_grad_norm_: coefficient max_norm / (norm + 1e-6),
      // never above 1.
      coef = (max_norm_ / (total + 1e-6)).clamp_max(1.0);
    }
    TensorList out;
    out.reserve(updates.size());
    for (const at::Tensor& u : updates) {
      out.push_back(inplace ? u.mul_(coef) : u * coef);
    }
    return out;
  }
  std::string Describe() const override {
    std::ostringstream os;
    os << "clip_grad_norm(max_norm=" << max_norm_ << ")";
    return os.str();
  }

 private:
  double max_norm_, norm_type_;
  bool error_if_nonfinite_;
};

class RegisterHookTx final : public Stateless {
 public:
  RegisterHookTx(std::function<at::Tensor(const at::Tensor&)> hook,
                 std::string description)
      : hook_(std::move(hook)), description_(std::move(description)) {}
  TensorList Update(const TensorList& updates, TransformState&,
                    const TensorList*, bool) const override {
    for (const at::Tensor& u : updates) {
      if (u.requires_grad()) {
        auto hook = hook_;
        u.register_hook([hook](const at::Tensor& grad) { return hook(grad); });
      }
    }
    return updates;
  }
  std::string Describe() const override {
    return "register_hook(" + description_ + ")";
  }

 private:
  std::function<at::Tensor(const at::Tensor&)> hook_;
  std::string description_;
};

class ChainTx final : public GradientTransformation {
 public:
  explicit ChainTx(std::vector<TransformPtr> transforms)
      : transforms_(std::move(transforms)) {}
  TransformState Init(const TensorList& params) const override {
    TransformState state{"ChainState", {}, {}};
    for (const auto& t : transforms_) state.children.push_back(t->Init(params));
    return state;
  }
  TensorList Update(const TensorList& updates, TransformState& state,
                    const TensorList* params, bool inplace) const override {
    TORCH_CHECK(state.children.size() == transforms_.size(),
                "chain of ", transforms_.size(), " transformations was given "
                "a state with ", state.children.size(), " parts");
    TensorList current = updates;
    for (size_t i = 0; i < transforms_.size(); ++i) {
      current = transforms_[i]->Update(current, state.children[i], params,
                                       inplace);
    }
    return current;
  }
  std::string Describe() const override {
    std::string s = "chain(";
    for (size_t i = 0; i < transforms_.size(); ++i) {
      s += (i ? ", " : "") + transforms_[i]->Describe();
    }
    return s + ")";
  }

 private:
  std::vector<TransformPtr> transforms_;
};

class IdentityTx final : public Stateless {
 public:
  TensorList Update(const TensorList& updates, TransformState&,
                    const TensorList*, bool) const override {
    return updates;
  }
  std::string Describe() const override { return "identity()"; }
};

}  // namespace

TransformPtr Scale(Hyper step_size) {
  return std::make_shared<ScaleTx>(std::move(step_size));
}

TransformPtr ScalePerLeaf(TensorList factors) {
  for (size_t i = 0; i < factors.size(); ++i) {
    TORCH_CHECK(factors[i].defined(), "scale_per_leaf: factor ", i,
                " is not a tensor");
  }
  return std::make_shared<ScalePerLeafTx>(std::move(factors));
}

TransformPtr ScaleBySchedule(Schedule schedule, std::string description) {
  TORCH_CHECK(static_cast<bool>(schedule),
              "scale_by_schedule: `schedule` must be a callable");
  return std::make_shared<ScaleByScheduleTx>(std::move(schedule),
                                             std::move(description));
}

TransformPtr FlipSign() { return Scale(-1.0); }

TransformPtr Trace(double momentum, double dampening, bool nesterov,
                   bool moment_requires_grad) {
  internal::CheckInUnitInterval(momentum, "momentum", /*closed_right=*/true);
  internal::CheckInUnitInterval(dampening, "dampening", /*closed_right=*/true);
  TORCH_CHECK(!nesterov || (momentum > 0 && dampening == 0),
              "nesterov momentum needs `momentum` > 0 and `dampening` == 0, "
              "got momentum=", momentum, ", dampening=", dampening);
  return std::make_shared<TraceTx>(momentum, dampening, nesterov,
                                   moment_requires_grad);
}

TransformPtr AddDecayedWeights(double weight_decay, std::vector<bool> mask) {
  internal::CheckNonNegative(weight_decay, "weight_decay");
  return std::make_shared<AddDecayedWeightsTx>(weight_decay, std::move(mask));
}

TransformPtr Masked(TransformPtr inner, std::vector<bool> mask) {
  TORCH_CHECK(inner != nullptr, "masked: `inner` must be a transformation");
  return std::make_shared<MaskedTx>(std::move(inner), std::move(mask));
}

TransformPtr NanToNum(double nan, c10::optional<double> posinf,
                      c10::optional<double> neginf) {
  return std::make_shared<NanToNumTx>(nan, posinf, neginf);
}

TransformPtr ClipGradNorm(double max_norm, double norm_type,
                          bool error_if_nonfinite) {
  TORCH_CHECK(max_norm > 0, "clip_grad_norm: `max_norm` must be > 0, got ",
              max_norm);
  TORCH_CHECK(norm_type > 0, "clip_grad_norm: `norm_type` must be > 0, got ",
              norm_type);
  return std::make_shared<ClipGradNormTx>(max_norm, norm_type,
                                          error_if_nonfinite);
}

TransformPtr RegisterHook(std::function<at::Tensor(const at::Tensor&)> hook,
                          std::string description) {
  TORCH_CHECK(static_cast<bool>(hook), "register_hook: `hook` must be callable");
  return std::make_shared<RegisterHookTx>(std::move(hook),
                                          std::move(description));
}

TransformPtr Chain(std::vector<TransformPtr> transforms) {
  for (size_t i = 0; i < transforms.size(); ++i) {
    TORCH_CHECK(transforms[i] != nullptr, "chain: transformation ", i,
                " is null");
  }
  return std::make_shared<ChainTx>(std::move(transforms));
}

TransformPtr Identity() { return std::make_shared<IdentityTx>(); }

}  // namespace metafuse::optim
