// metafuse's fused optimizer operators (TORCH_LIBRARY namespace `metafuse`).
//
// Every op returns the UPDATE and the new state (Optax/TorchOpt convention):
// apply it with new_param = param + update. With the same options the update
// equals torch.optim's parameter change, sign included (maximize, weight decay
// coupled as L2 or decoupled as in AdamW). `count` is the step number after
// this step (1 on the first step), a host integer: bias corrections and
// schedules are computed on the host, no device sync.
//
// Each op has a single-tensor form and a multi-tensor form (`*_multi`, lists
// of tensors, empty list = absent optional state / no params) that updates a
// whole parameter list in one parallel pass. All are differentiable w.r.t.
// grads, states and params (for weight decay) to any order: the backward is an
// exact closed form (docs/kernels.md). See kernels/optim_math.h for the math.
//
// Each function below is a DispatchedOp: a callable with exactly the
// signature shown, which calls the registered operator through the torch
// dispatcher, so C++ callers see exactly what Python and TorchScript see.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <mutex>
#include <optional>
#include <tuple>
#include <vector>

namespace metafuse {

using TensorVec = std::vector<at::Tensor>;

// The registered operator `name` ("metafuse::adam"), called through the
// dispatcher with the signature Fn; looked up once, on the first call.
template <class Fn>
class DispatchedOp;

template <class R, class... Args>
class DispatchedOp<R(Args...)> {
 public:
  explicit constexpr DispatchedOp(const char* name) : name_(name) {}

  R operator()(Args... args) const {
    std::call_once(once_, [this] {
      op_.emplace(c10::Dispatcher::singleton()
                      .findSchemaOrThrow(name_, "")
                      .template typed<R(Args...)>());
    });
    return op_->call(args...);
  }

 private:
  const char* name_;
  mutable std::once_flag once_;
  mutable std::optional<c10::TypedOperatorHandle<R(Args...)>> op_;
};

// Adam / AdamW and RAdam: return (update, mu, nu).
using AdamFamilyFn = std::tuple<at::Tensor, at::Tensor, at::Tensor>(
    const at::Tensor& grad, const at::Tensor& mu, const at::Tensor& nu,
    const c10::optional<at::Tensor>& param, int64_t count, double lr,
    double b1, double b2, double eps, double eps_root, double weight_decay,
    bool decoupled_weight_decay, bool maximize);
using AdamFamilyMultiFn = std::tuple<TensorVec, TensorVec, TensorVec>(
    at::TensorList grads, at::TensorList mus, at::TensorList nus,
    at::TensorList params, int64_t count, double lr, double b1, double b2,
    double eps, double eps_root, double weight_decay,
    bool decoupled_weight_decay, bool maximize);
inline const DispatchedOp<AdamFamilyFn> adam{"metafuse::adam"};
inline const DispatchedOp<AdamFamilyMultiFn> adam_multi{"metafuse::adam_multi"};
inline const DispatchedOp<AdamFamilyFn> radam{"metafuse::radam"};
inline const DispatchedOp<AdamFamilyMultiFn> radam_multi{
    "metafuse::radam_multi"};

// SGD: returns (update, momentum_buffer); the buffer is undefined (empty
// list) without momentum.
inline const DispatchedOp<std::tuple<at::Tensor, at::Tensor>(
    const at::Tensor& grad, const c10::optional<at::Tensor>& momentum_buffer,
    const c10::optional<at::Tensor>& param, int64_t count, double lr,
    double momentum, double dampening, bool nesterov, double weight_decay,
    bool maximize)>
    sgd{"metafuse::sgd"};
inline const DispatchedOp<std::tuple<TensorVec, TensorVec>(
    at::TensorList grads, at::TensorList momentum_buffers,
    at::TensorList params, int64_t count, double lr, double momentum,
    double dampening, bool nesterov, double weight_decay, bool maximize)>
    sgd_multi{"metafuse::sgd_multi"};

// RMSProp: returns (update, square_avg, grad_avg, momentum_buffer); grad_avg
// only when centered, momentum_buffer only when momentum != 0.
inline const DispatchedOp<std::tuple<at::Tensor, at::Tensor, at::Tensor,
                                     at::Tensor>(
    const at::Tensor& grad, const at::Tensor& square_avg,
    const c10::optional<at::Tensor>& grad_avg,
    const c10::optional<at::Tensor>& momentum_buffer,
    const c10::optional<at::Tensor>& param, double lr, double alpha,
    double eps, double eps_root, double weight_decay, double momentum,
    bool centered, bool maximize)>
    rmsprop{"metafuse::rmsprop"};
inline const DispatchedOp<std::tuple<TensorVec, TensorVec, TensorVec,
                                     TensorVec>(
    at::TensorList grads, at::TensorList square_avgs, at::TensorList grad_avgs,
    at::TensorList momentum_buffers, at::TensorList params, double lr,
    double alpha, double eps, double eps_root, double weight_decay,
    double momentum, bool centered, bool maximize)>
    rmsprop_multi{"metafuse::rmsprop_multi"};

// Adagrad: returns (update, sum).
inline const DispatchedOp<std::tuple<at::Tensor, at::Tensor>(
    const at::Tensor& grad, const at::Tensor& sum,
    const c10::optional<at::Tensor>& param, int64_t count, double lr,
    double lr_decay, double weight_decay, double eps, double eps_root,
    bool maximize)>
    adagrad{"metafuse::adagrad"};
inline const DispatchedOp<std::tuple<TensorVec, TensorVec>(
    at::TensorList grads, at::TensorList sums, at::TensorList params,
    int64_t count, double lr, double lr_decay, double weight_decay, double eps,
    double eps_root, bool maximize)>
    adagrad_multi{"metafuse::adagrad_multi"};

// Adamax: returns (update, mu, inf_norm).
inline const DispatchedOp<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
    const at::Tensor& grad, const at::Tensor& mu, const at::Tensor& inf_norm,
    const c10::optional<at::Tensor>& param, int64_t count, double lr,
    double b1, double b2, double eps, double weight_decay, bool maximize)>
    adamax{"metafuse::adamax"};
inline const DispatchedOp<std::tuple<TensorVec, TensorVec, TensorVec>(
    at::TensorList grads, at::TensorList mus, at::TensorList inf_norms,
    at::TensorList params, int64_t count, double lr, double b1, double b2,
    double eps, double weight_decay, bool maximize)>
    adamax_multi{"metafuse::adamax_multi"};

// Adadelta: returns (update, square_avg, acc_delta).
inline const DispatchedOp<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
    const at::Tensor& grad, const at::Tensor& square_avg,
    const at::Tensor& acc_delta, const c10::optional<at::Tensor>& param,
    double lr, double rho, double eps, double weight_decay, bool maximize)>
    adadelta{"metafuse::adadelta"};
inline const DispatchedOp<std::tuple<TensorVec, TensorVec, TensorVec>(
    at::TensorList grads, at::TensorList square_avgs,
    at::TensorList acc_deltas, at::TensorList params, double lr, double rho,
    double eps, double weight_decay, bool maximize)>
    adadelta_multi{"metafuse::adadelta_multi"};

}  // namespace metafuse
