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
#pragma once

#include <ATen/ATen.h>

#include <tuple>
#include <vector>

namespace metafuse {

using TensorVec = std::vector<at::Tensor>;

// Adam / AdamW: returns (update, mu, nu).
std::tuple<at::Tensor, at::Tensor, at::Tensor> adam(
    const at::Tensor& grad, const at::Tensor& mu, const at::Tensor& nu,
    const c10::optional<at::Tensor>& param, int64_t count, double lr,
    double b1, double b2, double eps, double eps_root, double weight_decay,
    bool decoupled_weight_decay, bool maximize);
std::tuple<TensorVec, TensorVec, TensorVec> adam_multi(
    at::TensorList grads, at::TensorList mus, at::TensorList nus,
    at::TensorList params, int64_t count, double lr, double b1, double b2,
    double eps, double eps_root, double weight_decay,
    bool decoupled_weight_decay, bool maximize);

// SGD: returns (update, momentum_buffer); the buffer is undefined (empty
// list) without momentum.
std::tuple<at::Tensor, at::Tensor> sgd(
    const at::Tensor& grad, const c10::optional<at::Tensor>& momentum_buffer,
    const c10::optional<at::Tensor>& param, int64_t count, double lr,
    double momentum, double dampening, bool nesterov, double weight_decay,
    bool maximize);
std::tuple<TensorVec, TensorVec> sgd_multi(
    at::TensorList grads, at::TensorList momentum_buffers,
    at::TensorList params, int64_t count, double lr, double momentum,
    double dampening, bool nesterov, double weight_decay, bool maximize);

// RMSProp: returns (update, square_avg, grad_avg, momentum_buffer); grad_avg
// only when centered, momentum_buffer only when momentum != 0.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> rmsprop(
    const at::Tensor& grad, const at::Tensor& square_avg,
    const c10::optional<at::Tensor>& grad_avg,
    const c10::optional<at::Tensor>& momentum_buffer,
    const c10::optional<at::Tensor>& param, double lr, double alpha,
    double eps, double eps_root, double weight_decay, double momentum,
    bool centered, bool maximize);
std::tuple<TensorVec, TensorVec, TensorVec, TensorVec> rmsprop_multi(
    at::TensorList grads, at::TensorList square_avgs, at::TensorList grad_avgs,
    at::TensorList momentum_buffers, at::TensorList params, double lr,
    double alpha, double eps, double eps_root, double weight_decay,
    double momentum, bool centered, bool maximize);

// Adagrad: returns (update, sum).
std::tuple<at::Tensor, at::Tensor> adagrad(
    const at::Tensor& grad, const at::Tensor& sum,
    const c10::optional<at::Tensor>& param, int64_t count, double lr,
    double lr_decay, double weight_decay, double eps, double eps_root,
    bool maximize);
std::tuple<TensorVec, TensorVec> adagrad_multi(
    at::TensorList grads, at::TensorList sums, at::TensorList params,
    int64_t count, double lr, double lr_decay, double weight_decay, double eps,
    double eps_root, bool maximize);

// Adamax: returns (update, mu, inf_norm).
std::tuple<at::Tensor, at::Tensor, at::Tensor> adamax(
    const at::Tensor& grad, const at::Tensor& mu, const at::Tensor& inf_norm,
    const c10::optional<at::Tensor>& param, int64_t count, double lr,
    double b1, double b2, double eps, double weight_decay, bool maximize);
std::tuple<TensorVec, TensorVec, TensorVec> adamax_multi(
    at::TensorList grads, at::TensorList mus, at::TensorList inf_norms,
    at::TensorList params, int64_t count, double lr, double b1, double b2,
    double eps, double weight_decay, bool maximize);

// Adadelta: returns (update, square_avg, acc_delta).
std::tuple<at::Tensor, at::Tensor, at::Tensor> adadelta(
    const at::Tensor& grad, const at::Tensor& square_avg,
    const at::Tensor& acc_delta, const c10::optional<at::Tensor>& param,
    double lr, double rho, double eps, double weight_decay, bool maximize);
std::tuple<TensorVec, TensorVec, TensorVec> adadelta_multi(
    at::TensorList grads, at::TensorList square_avgs,
    at::TensorList acc_deltas, at::TensorList params, double lr, double rho,
    double eps, double weight_decay, bool maximize);

// RAdam: returns (update, mu, nu).
std::tuple<at::Tensor, at::Tensor, at::Tensor> radam(
    const at::Tensor& grad, const at::Tensor& mu, const at::Tensor& nu,
    const c10::optional<at::Tensor>& param, int64_t count, double lr,
    double b1, double b2, double eps, double eps_root, double weight_decay,
    bool decoupled_weight_decay, bool maximize);
std::tuple<TensorVec, TensorVec, TensorVec> radam_multi(
    at::TensorList grads, at::TensorList mus, at::TensorList nus,
    at::TensorList params, int64_t count, double lr, double b1, double b2,
    double eps, double eps_root, double weight_decay,
    bool decoupled_weight_decay, bool maximize);

}  // namespace metafuse
