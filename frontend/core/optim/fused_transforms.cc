#include "metafuse/optim/fused_transforms.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <functional>
#include <sstream>

#include "kernels/optimizers.h"
#include "metafuse/optim/state_helpers.h"

namespace metafuse::optim {
namespace {

// One fused step: grads, the state's per-parameter fields (replaced by the
// new ones), params, the step count after this step -> updates.
using FusedStep = std::function<TensorList(
    const TensorList& grads, std::vector<TensorList*>& fields,
    const TensorList& params, int64_t count)>;

class FusedTx final : public GradientTransformation {
 public:
  FusedTx(std::string description, std::string state_name,
          std::vector<std::string> fields, bool has_count, FusedStep step)
      : description_(std::move(description)),
        state_name_(std::move(state_name)),
        fields_(std::move(fields)),
        has_count_(has_count),
        step_(std::move(step)) {}

  TransformState Init(const TensorList& params) const override {
    TransformState s{state_name_, {}, {}};
    for (const auto& f : fields_) {
      s.fields.push_back(internal::FilledLike(f, params, 0.0, false));
    }
    if (has_count_) s.fields.push_back(internal::CountField());
    return s;
  }

  TensorList Update(const TensorList& updates, TransformState& state,
                    const TensorList* params, bool inplace) const override {
    internal::CheckStateMatches(state, updates);
    if (params != nullptr) CheckSameLeaves(*params, updates, "params", "updates");
    std::vector<TensorList*> fields;
    for (const auto& f : fields_) fields.push_back(&state.field(f).tensors);
    const int64_t count = has_count_ ? internal::ReadCount(state) + 1 : 1;
    TensorList out = step_(updates, fields, params ? *params : TensorList{},
                           count);
    if (has_count_) internal::AdvanceCount(state, inplace);
    return out;
  }

  std::string Describe() const override { return description_; }

 private:
  std::string description_, state_name_;
  std::vector<std::string> fields_;
  bool has_count_;
  FusedStep step_;
};

double ConstantLr(const LearningRate& lr, const char* alias) {
  TORCH_CHECK(!lr.schedule && !lr.constant.is_tensor(), alias,
              "(fused=True) needs a constant number `lr`; use fused=False "
              "for a schedule or a tensor learning rate");
  TORCH_CHECK(lr.constant.value >= 0.0, "`lr` must be >= 0 (a learning rate; "
              "use maximize=True to ascend), got ", lr.constant.value);
  return lr.constant.value;
}

// Weight decay reads the parameters; the op takes an empty list otherwise.
void CheckParams(const TensorList& params, double weight_decay,
                 const char* alias) {
  TORCH_CHECK(weight_decay == 0.0 || !params.empty(), alias,
              "(fused=True) with weight_decay needs `params` passed to "
              "update()");
}

std::string Describe(const char* alias, double lr) {
  std::ostringstream os;
  os << "fused_" << alias << "(lr=" << lr << ")";
  return os.str();
}

}  // namespace

TransformPtr FusedSgd(const SgdOptions& o) {
  Sgd(o);  // validates the options exactly as the unfused alias does
  const double lr = ConstantLr(o.lr, "sgd");
  const bool has_momentum = o.momentum != 0.0;
  FusedStep step = [o, lr, has_momentum](const TensorList& g,
                                         std::vector<TensorList*>& f,
                                         const TensorList& p, int64_t count) {
    CheckParams(p, o.weight_decay, "sgd");
    auto [updates, buffers] = sgd_multi(
        g, has_momentum ? *f[0] : TensorList{}, o.weight_decay ? p : TensorList{},
        count, lr, o.momentum, o.dampening, o.nesterov, o.weight_decay,
        o.maximize);
    if (has_momentum) *f[0] = std::move(buffers);
    return updates;
  };
  if (!has_momentum) {
    return std::make_shared<FusedTx>(Describe("sgd", lr), "EmptyState",
                                     std::vector<std::string>{}, false, step);
  }
  return std::make_shared<FusedTx>(Describe("sgd", lr), "TraceState",
                                   std::vector<std::string>{"trace"}, true,
                                   step);
}

TransformPtr FusedAdam(const AdamOptions& o, bool decoupled) {
  TORCH_CHECK(o.weight_decay_mask.empty(), "adamw(fused=True) does not take "
              "a weight-decay `mask`; use fused=False");
  TORCH_CHECK(!o.amsgrad, decoupled ? "adamw" : "adam",
              "(fused=True) does not support amsgrad; use fused=False");
  decoupled ? AdamW(o) : Adam(o);  // validation
  const double lr = ConstantLr(o.lr, decoupled ? "adamw" : "adam");
  FusedStep step = [o, lr, decoupled](const TensorList& g,
                                      std::vector<TensorList*>& f,
                                      const TensorList& p, int64_t count) {
    CheckParams(p, o.weight_decay, "adam");
    auto [updates, mu, nu] = adam_multi(
        g, *f[0], *f[1], o.weight_decay ? p : TensorList{}, count, lr, o.b1,
        o.b2, o.eps, o.eps_root, o.weight_decay, decoupled, o.maximize);
    *f[0] = std::move(mu);
    *f[1] = std::move(nu);
    return updates;
  };
  return std::make_shared<FusedTx>(Describe(decoupled ? "adamw" : "adam", lr),
                                   "ScaleByAdamState",
                                   std::vector<std::string>{"mu", "nu"}, true,
                                   step);
}

TransformPtr FusedAdamax(const AdamaxOptions& o) {
  Adamax(o);
  const double lr = ConstantLr(o.lr, "adamax");
  FusedStep step = [o, lr](const TensorList& g, std::vector<TensorList*>& f,
                           const TensorList& p, int64_t count) {
    CheckParams(p, o.weight_decay, "adamax");
    auto [updates, mu, nu] =
        adamax_multi(g, *f[0], *f[1], o.weight_decay ? p : TensorList{}, count,
                     lr, o.b1, o.b2, o.eps, o.weight_decay, o.maximize);
    *f[0] = std::move(mu);
    *f[1] = std::move(nu);
    return updates;
  };
  return std::make_shared<FusedTx>(Describe("adamax", lr), "ScaleByAdamaxState",
                                   std::vector<std::string>{"mu", "nu"}, true,
                                   step);
}

TransformPtr FusedRAdam(const RAdamOptions& o) {
  RAdam(o);
  TORCH_CHECK(o.threshold == 5.0, "radam(fused=True) uses torch.optim's "
              "rectification threshold 5; use fused=False for ", o.threshold);
  const double lr = ConstantLr(o.lr, "radam");
  FusedStep step = [o, lr](const TensorList& g, std::vector<TensorList*>& f,
                           const TensorList& p, int64_t count) {
    CheckParams(p, o.weight_decay, "radam");
    auto [updates, mu, nu] = radam_multi(
        g, *f[0], *f[1], o.weight_decay ? p : TensorList{}, count, lr, o.b1,
        o.b2, o.eps, /*eps_root=*/0.0, o.weight_decay,
        /*decoupled_weight_decay=*/false, o.maximize);
    *f[0] = std::move(mu);
    *f[1] = std::move(nu);
    return updates;
  };
  return std::make_shared<FusedTx>(Describe("radam", lr), "ScaleByRAdamState",
                                   std::vector<std::string>{"mu", "nu"}, true,
                                   step);
}

TransformPtr FusedAdadelta(const AdadeltaOptions& o) {
  Adadelta(o);
  const double lr = ConstantLr(o.lr, "adadelta");
  FusedStep step = [o, lr](const TensorList& g, std::vector<TensorList*>& f,
                           const TensorList& p, int64_t) {
    CheckParams(p, o.weight_decay, "adadelta");
    auto [updates, e_g, e_x] =
        adadelta_multi(g, *f[0], *f[1], o.weight_decay ? p : TensorList{}, lr,
                       o.rho, o.eps, o.weight_decay, o.maximize);
    *f[0] = std::move(e_g);
    *f[1] = std::move(e_x);
    return updates;
  };
  return std::make_shared<FusedTx>(Describe("adadelta", lr),
                                   "ScaleByAdadeltaState",
                                   std::vector<std::string>{"e_g", "e_x"},
                                   false, step);
}

TransformPtr FusedAdagrad(const AdagradOptions& o) {
  Adagrad(o);
  const double lr = ConstantLr(o.lr, "adagrad");
  FusedStep step = [o, lr](const TensorList& g, std::vector<TensorList*>& f,
                           const TensorList& p, int64_t count) {
    CheckParams(p, o.weight_decay, "adagrad");
    auto [updates, sums] =
        adagrad_multi(g, *f[0], o.weight_decay ? p : TensorList{}, count, lr,
                      o.lr_decay, o.weight_decay, o.eps, /*eps_root=*/0.0,
                      o.maximize);
    *f[0] = std::move(sums);
    return updates;
  };
  auto tx = std::make_shared<FusedTx>(
      Describe("adagrad", lr), "FusedAdagradState",
      std::vector<std::string>{"sum_of_squares"}, true, step);
  if (o.initial_accumulator_value == 0.0) return tx;
  // The accumulator starts at initial_accumulator_value, not zero.
  class WithInitial final : public GradientTransformation {
   public:
    WithInitial(TransformPtr inner, double initial)
        : inner_(std::move(inner)), initial_(initial) {}
    TransformState Init(const TensorList& params) const override {
      TransformState s = inner_->Init(params);
      for (auto& t : s.field("sum_of_squares").tensors) t.fill_(initial_);
      return s;
    }
    TensorList Update(const TensorList& u, TransformState& s,
                      const TensorList* p, bool inplace) const override {
      return inner_->Update(u, s, p, inplace);
    }
    std::string Describe() const override { return inner_->Describe(); }

   private:
    TransformPtr inner_;
    double initial_;
  };
  return std::make_shared<WithInitial>(tx, o.initial_accumulator_value);
}

TransformPtr FusedRmsProp(const RmsPropOptions& o) {
  RmsProp(o);
  const double lr = ConstantLr(o.lr, "rmsprop");
  const bool has_momentum = o.momentum != 0.0;
  std::vector<std::string> fields = {"nu"};
  if (o.centered) fields.push_back("mu");
  if (has_momentum) fields.push_back("trace");
  // One record name per combination, each a namedtuple in Python.
  const std::string name = std::string(o.centered ? "Centered" : "") +
                           (has_momentum ? "Momentum" : "") + "RMSPropState";
  FusedStep step = [o, lr, has_momentum](const TensorList& g,
                                         std::vector<TensorList*>& f,
                                         const TensorList& p, int64_t) {
    CheckParams(p, o.weight_decay, "rmsprop");
    TensorList* mu = o.centered ? f[1] : nullptr;
    TensorList* trace = has_momentum ? f.back() : nullptr;
    auto [updates, nu, new_mu, new_trace] = rmsprop_multi(
        g, *f[0], mu ? *mu : TensorList{}, trace ? *trace : TensorList{},
        o.weight_decay ? p : TensorList{}, lr, o.alpha, o.eps,
        /*eps_root=*/0.0, o.weight_decay, o.momentum, o.centered, o.maximize);
    *f[0] = std::move(nu);
    if (mu) *mu = std::move(new_mu);
    if (trace) *trace = std::move(new_trace);
    return updates;
  };
  return std::make_shared<FusedTx>(Describe("rmsprop", lr), name, fields,
                                   false, step);
}

}  // namespace metafuse::optim
