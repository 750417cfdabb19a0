#include "kernels/ema_update.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

namespace metafuse {
namespace {

void check_ema_args(const at::Tensor& moment, const at::Tensor& update,
                    double decay, int64_t order) {
  TORCH_CHECK(order == 1 || order == 2,
              "metafuse::ema_update: `order` must be 1 (first moment) or 2 "
              "(second moment), got ", order);
  TORCH_CHECK(decay >= 0.0 && decay <= 1.0,
              "metafuse::ema_update: `decay` must lie in [0, 1], got ", decay);
  TORCH_CHECK(moment.sizes() == update.sizes(),
              "metafuse::ema_update: `moment` and `update` must have the same "
              "shape, got ", moment.sizes(), " and ", update.sizes());
  TORCH_CHECK(moment.scalar_type() == update.scalar_type(),
              "metafuse::ema_update: `moment` and `update` must have the same "
              "dtype, got ", moment.scalar_type(), " and ",
              update.scalar_type());
  TORCH_CHECK(at::isFloatingType(moment.scalar_type()),
              "metafuse::ema_update: expected floating-point tensors, got ",
              moment.scalar_type());
  TORCH_CHECK(moment.device() == update.device(),
              "metafuse::ema_update: `moment` and `update` must be on the same "
              "device, got ", moment.device(), " and ", update.device());
}

// The element loop of the fused forward, for one chunk [begin, end). Kept out
// of the dispatch macro so the pragma applies; `order` is a template argument
// so the hot loop has no per-element branch. Reduced-precision types are
// computed in float (at::opmath_type).
template <typename scalar_t, int kOrder>
void ema_update_chunk(const scalar_t* __restrict__ moment,
                      const scalar_t* __restrict__ update,
                      scalar_t* __restrict__ out, double decay, int64_t begin,
                      int64_t end) {
  using opmath_t = at::opmath_type<scalar_t>;
  const opmath_t d = static_cast<opmath_t>(decay);
  const opmath_t one_minus_d = static_cast<opmath_t>(1.0 - decay);
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    const opmath_t x = static_cast<opmath_t>(update[i]);
    const opmath_t x_pow = kOrder == 1 ? x : x * x;
    out[i] = static_cast<scalar_t>(d * static_cast<opmath_t>(moment[i]) +
                                   one_minus_d * x_pow);
  }
}

// The fused forward: one read of each input, one write, no temporaries.
at::Tensor ema_update_cpu(const at::Tensor& moment, const at::Tensor& update,
                          double decay, int64_t order) {
  check_ema_args(moment, update, decay, order);
  const at::Tensor m = moment.contiguous();
  const at::Tensor u = update.contiguous();
  at::Tensor out = at::empty_like(m, at::MemoryFormat::Contiguous);
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, m.scalar_type(), "metafuse::ema_update", [&] {
        const scalar_t* mp = m.data_ptr<scalar_t>();
        const scalar_t* up = u.data_ptr<scalar_t>();
        scalar_t* op = out.data_ptr<scalar_t>();
        at::parallel_for(0, m.numel(), at::internal::GRAIN_SIZE,
                         [&](int64_t begin, int64_t end) {
                           if (order == 1) {
                             ema_update_chunk<scalar_t, 1>(mp, up, op, decay,
                                                           begin, end);
                           } else {
                             ema_update_chunk<scalar_t, 2>(mp, up, op, decay,
                                                           begin, end);
                           }
                         });
      });
  return out;
}

// Closed-form backward:
//   d out / d moment = decay
//   d out / d update = (1 - decay) * order * update^(order - 1)
// Written in ATen ops so that autograd can differentiate it again.
class EmaUpdateFunction
    : public torch::autograd::Function<EmaUpdateFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx,
                            const at::Tensor& moment, const at::Tensor& update,
                            double decay, int64_t order) {
    ctx->saved_data["decay"] = decay;
    ctx->saved_data["order"] = order;
    if (order == 2) ctx->save_for_backward({update});
    at::AutoDispatchBelowADInplaceOrView guard;
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("metafuse::ema_update", "")
                         .typed<decltype(ema_update)>();
    return op.call(moment, update, decay, order);
  }

  static torch::autograd::variable_list backward(
      torch::autograd::AutogradContext* ctx,
      torch::autograd::variable_list grad_outputs) {
    const double decay = ctx->saved_data["decay"].toDouble();
    const int64_t order = ctx->saved_data["order"].toInt();
    const at::Tensor& g = grad_outputs[0];
    at::Tensor grad_moment = g * decay;
    at::Tensor grad_update;
    if (order == 1) {
      grad_update = g * (1.0 - decay);
    } else {
      const at::Tensor update = ctx->get_saved_variables()[0];
      grad_update = g * update * (2.0 * (1.0 - decay));
    }
    return {grad_moment, grad_update, at::Tensor(), at::Tensor()};
  }
};

at::Tensor ema_update_autograd(const at::Tensor& moment,
                               const at::Tensor& update, double decay,
                               int64_t order) {
  return EmaUpdateFunction::apply(moment, update, decay, order);
}

}  // namespace

at::Tensor ema_update(const at::Tensor& moment, const at::Tensor& update,
                      double decay, int64_t order) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("metafuse::ema_update", "")
                       .typed<decltype(ema_update)>();
  return op.call(moment, update, decay, order);
}

TORCH_LIBRARY_FRAGMENT(metafuse, m) {
  m.def("ema_update(Tensor moment, Tensor update, float decay, int order) "
        "-> Tensor");
}

TORCH_LIBRARY_IMPL(metafuse, CPU, m) {
  m.impl("ema_update", &ema_update_cpu);
}

TORCH_LIBRARY_IMPL(metafuse, Autograd, m) {
  m.impl("ema_update", &ema_update_autograd);
}

}  // namespace metafuse
