#include "compiler/autodiff/inner_loop_body.h"

#include <cmath>

#include <ATen/ATen.h>

#include "compiler/autodiff/autodiff.h"
#include "compiler/ir/ir_helpers.h"

namespace metafuse::compiler {
namespace {

using torch::jit::Graph;
using torch::jit::Value;

bool IsAdam(const OptimizerSpec& o) { return o.kind == "adam" || o.kind == "adamw"; }
bool HasMomentum(const OptimizerSpec& o) { return o.kind == "sgd" && o.momentum != 0.0; }

// SgdElement (kernels/optim_math.h) with momentum, in primitives:
//   ge = sign g + l2 p;  b = keep buf + take ge;  u = -lr (nest_g ge + nest_b b)
// keep and take the per-step inputs; returns (p + u, b).
std::vector<Value*> AppendSgdMomentumStep(Graph& g, Value* p, Value* grad, Value* buf,
                                          Value* keep, Value* take, Value* lr,
                                          const OptimizerSpec& o) {
  auto c = [&](double x) { return g.insertConstant(x); };
  Value* ge = o.maximize ? InsertOp(g, "aten::neg", {grad}) : grad;
  if (o.weight_decay != 0.0) {
    ge = InsertOp(g, "aten::add", {ge, InsertOp(g, "aten::mul", {p, c(o.weight_decay)})});
  }
  Value* b = InsertOp(g, "aten::add", {InsertOp(g, "aten::mul", {buf, keep}),
                                       InsertOp(g, "aten::mul", {ge, take})});
  Value* direction =
      o.nesterov ? InsertOp(g, "aten::add", {ge, InsertOp(g, "aten::mul", {b, c(o.momentum)})})
                 : b;
  Value* rate = lr != nullptr ? lr : c(o.lr);
  return {InsertOp(g, "aten::sub", {p, InsertOp(g, "aten::mul", {direction, rate})}), b};
}

// AdamElement (kernels/optim_math.h) in primitives, operation for operation:
//   ge = sign g + l2 p;  m = b1 mu + (1-b1) ge;  v = b2 nu + (1-b2) ge^2
//   r = sqrt(v inv_bc2 + eps_root);  u = -step m / (r + eps) - lr wd p
// with step = lr / bc1 and inv_bc2 the per-step inputs. Returns (p + u, m, v).
std::vector<Value*> AppendAdamStep(Graph& g, Value* p, Value* grad, Value* mu, Value* nu,
                                   Value* step, Value* inv_bc2, const OptimizerSpec& o) {
  const bool decoupled = o.kind == "adamw";
  auto c = [&](double x) { return g.insertConstant(x); };
  Value* ge = o.maximize ? InsertOp(g, "aten::neg", {grad}) : grad;
  if (!decoupled && o.weight_decay != 0.0) {
    ge = InsertOp(g, "aten::add", {ge, InsertOp(g, "aten::mul", {p, c(o.weight_decay)})});
  }
  Value* m = InsertOp(g, "aten::add", {InsertOp(g, "aten::mul", {mu, c(o.b1)}),
                                       InsertOp(g, "aten::mul", {ge, c(1.0 - o.b1)})});
  Value* v = InsertOp(
      g, "aten::add",
      {InsertOp(g, "aten::mul", {nu, c(o.b2)}),
       InsertOp(g, "aten::mul", {InsertOp(g, "aten::mul", {ge, ge}), c(1.0 - o.b2)})});
  Value* scaled = InsertOp(g, "aten::mul", {v, inv_bc2});
  if (o.eps_root != 0.0) scaled = InsertOp(g, "aten::add", {scaled, c(o.eps_root)});
  Value* r = InsertOp(g, "aten::sqrt", {scaled});
  Value* u = InsertOp(g, "aten::div", {InsertOp(g, "aten::mul", {InsertOp(g, "aten::neg", {step}), m}),
                                       InsertOp(g, "aten::add", {r, c(o.eps)})});
  if (decoupled && o.weight_decay != 0.0) {
    u = InsertOp(g, "aten::sub", {u, InsertOp(g, "aten::mul", {p, c(o.lr * o.weight_decay)})});
  }
  return {InsertOp(g, "aten::add", {p, u}), m, v};
}

}  // namespace

int64_t StateSlotsPerParam(const OptimizerSpec& o) {
  return IsAdam(o) ? 3 : HasMomentum(o) ? 2 : 1;
}
int64_t PerStepInputs(const OptimizerSpec& o) { return IsAdam(o) || HasMomentum(o) ? 2 : 0; }

std::vector<int64_t> InnerLoopBodyDifferentiableInputs(const InnerLoopLayout& layout,
                                                       const OptimizerSpec& o) {
  const int64_t num_state = layout.num_params * StateSlotsPerParam(o);
  std::vector<int64_t> diff;
  for (int64_t i = 0; i < num_state; ++i) diff.push_back(i);
  const int64_t extras_begin = num_state + layout.num_batch;
  for (int64_t i = 0; i < layout.num_extra; ++i) diff.push_back(extras_begin + i);
  if (o.lr_is_input) {
    const int64_t count = o.lr_per_param ? layout.num_params : 1;
    for (int64_t i = 0; i < count; ++i) diff.push_back(extras_begin + layout.num_extra + i);
  }
  return diff;
}

std::vector<at::Tensor> PerStepTables(const OptimizerSpec& o, int64_t steps,
                                      const at::TensorOptions& options) {
  if (PerStepInputs(o) == 0) return {};
  std::vector<double> first(steps), second(steps);
  for (int64_t k = 0; k < steps; ++k) {
    const double count = static_cast<double>(k + 1);
    if (IsAdam(o)) {
      first[k] = o.lr / (1.0 - std::pow(o.b1, count));  // step
      second[k] = 1.0 / (1.0 - std::pow(o.b2, count));  // inv_bc2
    } else {
      first[k] = k == 0 ? 0.0 : o.momentum;          // keep
      second[k] = k == 0 ? 1.0 : 1.0 - o.dampening;  // take
    }
  }
  auto table = [&](std::vector<double>& values) {
    return at::tensor(values, at::TensorOptions().dtype(at::kDouble))
        .to(at::TensorOptions().dtype(options.dtype()).device(options.device()));
  };
  return {table(first), table(second)};
}

std::shared_ptr<Graph> BuildInnerLoopBody(const Graph& loss_graph, const InnerLoopLayout& layout,
                                          const OptimizerSpec& o, StageLog* log) {
  const int64_t num_params = layout.num_params;
  const int64_t n_in = num_params + layout.num_batch + layout.num_extra;
  TORCH_CHECK(static_cast<int64_t>(loss_graph.inputs().size()) == n_in, "loss graph has ",
              loss_graph.inputs().size(), " inputs, expected ", n_in);
  TORCH_CHECK(loss_graph.outputs().size() == 1, "the loss graph must return exactly one value");
  TORCH_CHECK(o.kind == "sgd" || IsAdam(o), "unsupported optimizer '", o.kind, "'");
  TORCH_CHECK(!o.lr_is_input || o.kind == "sgd",
              "a tensor learning rate is compiled for sgd only");
  auto body = std::make_shared<Graph>();
  auto add_input = [&](const char* name, const c10::TypePtr& type) {
    Value* in = body->addInput(name);
    in->setType(type);
    return in;
  };
  std::vector<Value*> params, mu, nu, buf, fixed, lr_inputs;
  for (int64_t i = 0; i < num_params; ++i) {
    params.push_back(add_input("param", loss_graph.inputs()[i]->type()));
  }
  if (IsAdam(o)) {
    for (int64_t i = 0; i < num_params; ++i) mu.push_back(add_input("mu", params[i]->type()));
    for (int64_t i = 0; i < num_params; ++i) nu.push_back(add_input("nu", params[i]->type()));
  }
  if (HasMomentum(o)) {
    for (int64_t i = 0; i < num_params; ++i) buf.push_back(add_input("buf", params[i]->type()));
  }
  for (int64_t i = num_params; i < n_in; ++i) {
    fixed.push_back(add_input("fixed", loss_graph.inputs()[i]->type()));
  }
  if (o.lr_is_input) {
    const int64_t count = o.lr_per_param ? num_params : 1;
    for (int64_t i = 0; i < count; ++i) lr_inputs.push_back(add_input("lr", c10::TensorType::get()));
  }
  Value* step = nullptr;     // Adam: lr / bc1;  momentum: keep
  Value* inv_bc2 = nullptr;  // Adam: 1 / bc2;   momentum: take
  if (IsAdam(o)) {
    step = add_input("adam_step", c10::TensorType::get());
    inv_bc2 = add_input("adam_inv_bc2", c10::TensorType::get());
  } else if (HasMomentum(o)) {
    step = add_input("momentum_keep", c10::TensorType::get());
    inv_bc2 = add_input("momentum_take", c10::TensorType::get());
  }

  torch::jit::WithInsertPoint guard(body->return_node());
  std::vector<Value*> call_inputs = params;
  call_inputs.insert(call_inputs.end(), fixed.begin(), fixed.end());
  Value* loss =
      torch::jit::insertGraph(*body, const_cast<Graph&>(loss_graph), call_inputs)[0];
  Value* seed = InsertOp(*body, "aten::ones_like", {loss});
  std::vector<Value*> grads = AppendVjp(*body, {loss}, {seed}, params);
  torch::jit::WithInsertPoint at_end(body->return_node());
  std::vector<Value*> next_params, next_mu, next_nu, next_buf;
  for (int64_t i = 0; i < num_params; ++i) {
    Value* lr = lr_inputs.empty() ? nullptr : lr_inputs[o.lr_per_param ? i : 0];
    if (HasMomentum(o)) {
      std::vector<Value*> r =
          AppendSgdMomentumStep(*body, params[i], grads[i], buf[i], step, inv_bc2, lr, o);
      next_params.push_back(r[0]);
      next_buf.push_back(r[1]);
    } else if (IsAdam(o)) {
      std::vector<Value*> r = AppendAdamStep(*body, params[i], grads[i], mu[i], nu[i], step,
                                             inv_bc2, o);
      next_params.push_back(r[0]);
      next_mu.push_back(r[1]);
      next_nu.push_back(r[2]);
    } else {
      next_params.push_back(AppendSgdStep(*body, params[i], grads[i], o, lr));
    }
  }
  for (Value* v : next_params) body->registerOutput(v);
  for (Value* v : next_mu) body->registerOutput(v);
  for (Value* v : next_nu) body->registerOutput(v);
  for (Value* v : next_buf) body->registerOutput(v);
  body->registerOutput(loss);
  if (log) log->Record("loop_body", *body);
  CleanUp(body);
  if (log) log->Record("loop_body_cleaned", *body);
  return body;
}

}  // namespace metafuse::compiler
