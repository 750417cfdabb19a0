#include "runtime/executor/loop_node.h"

#include <map>
#include <optional>
#include <set>
#include <sstream>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/autograd/graph_task.h>

#include "runtime/base/profiler.h"
#include "runtime/base/revolve_schedule.h"

namespace metafuse::runtime {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using Values = std::vector<c10::IValue>;

int64_t BytesOf(const Values& values, size_t begin = 0, size_t end = SIZE_MAX) {
  int64_t bytes = 0;
  for (size_t i = begin; i < std::min(end, values.size()); ++i) {
    if (values[i].isTensor() && values[i].toTensor().defined()) {
      const at::Tensor& t = values[i].toTensor();
      bytes += static_cast<int64_t>(t.numel() * t.element_size());
    }
  }
  return bytes;
}

struct TensorMeta {
  std::vector<int64_t> sizes;
  at::TensorOptions options;
  explicit TensorMeta(const at::Tensor& t) : sizes(t.sizes().vec()), options(t.options()) {}
  at::Tensor Zeros() const { return at::zeros(sizes, options); }
};

// Everything one run keeps between its forward and its backward.
struct LoopRun : torch::CustomClassHolder {
  std::shared_ptr<const ExecutableProgram> body;
  std::shared_ptr<const LoopSection> plan;
  std::shared_ptr<LoopSchedule> schedule;
  int64_t num_state = 0;
  Values fixed;                      // the body's fixed inputs
  std::vector<at::Tensor> tables;    // the per-step tables, on the inputs' device
  std::vector<TensorMeta> state_meta;  // for zero cotangents
  std::optional<TensorMeta> loss_meta;  // for zero cotangents of the losses
  std::vector<Values> saved;          // store_all: every step's saved values
  std::map<int64_t, Values> stored;   // otherwise: the state before step k
  int64_t num_inputs = 0;

  Values BodyInputs(const Values& state, int64_t k) const {
    Values in = state;
    in.insert(in.end(), fixed.begin(), fixed.end());
    for (const at::Tensor& table : tables) in.push_back(table.select(0, k));
    return in;
  }
  Values RunStep(const Values& state, int64_t k) const {
    return body->forward.Run(BodyInputs(state, k));
  }
  Values NextState(Values&& out) const {
    out.resize(num_state);
    return std::move(out);
  }
  Values Saved(Values&& out) const {
    return Values(std::make_move_iterator(out.begin() + num_state + 1),
                  std::make_move_iterator(out.end()));
  }
};

// The reverse sweep of one backward: cotangents flow from step K to 0.
class ReverseSweep {
 public:
  ReverseSweep(const LoopRun& run, Values cot_state, std::vector<at::Tensor> cot_losses,
               bool keep)
      : run_(run), cot_state_(std::move(cot_state)), cot_losses_(std::move(cot_losses)),
        keep_(keep), fixed_grads_(run.fixed.size()) {}

  void StoredAll(std::vector<Values>& saved) {
    for (int64_t k = static_cast<int64_t>(saved.size()) - 1; k >= 0; --k) {
      Values s = keep_ ? saved[k] : std::move(saved[k]);
      if (!keep_) saved[k].clear();
      BackStep(k, std::move(s));
    }
  }

  // Reverses steps [a, b) from the state before step a, with `slots`
  // snapshots (the one held by the caller included).
  void Reverse(int64_t a, int64_t b, int64_t slots, const Values& state_a,
               std::map<int64_t, Values>& stored) {
    while (b - a >= 1) {
      if (b - a == 1) {
        Tape(a, state_a);
        return;
      }
      const int64_t m = a + RevolveSplit(b - a, slots);
      Values state_m;
      auto found = stored.find(m);
      if (slots > 1 && found != stored.end()) {  // the forward kept it
        state_m = keep_ ? found->second : std::move(found->second);
        if (!keep_) stored.erase(found);
      } else {
        state_m = Advance(state_a, a, m);
      }
      if (slots > 1) {
        Reverse(m, b, slots - 1, state_m, stored);
      } else {  // one slot: state_m is only the start of step b - 1
        Tape(m, state_m);
      }
      b = m;
    }
  }

  const Values& cot_state() const { return cot_state_; }
  std::vector<at::Tensor>& fixed_grads() { return fixed_grads_; }
  int64_t recomputed() const { return recomputed_; }

 private:
  Values Advance(const Values& from, int64_t a, int64_t b) {
    ProfileScope scope("recompute");
    Values state = from;
    for (int64_t k = a; k < b; ++k) {
      state = run_.NextState(run_.RunStep(state, k));
      ++recomputed_;
    }
    return state;
  }

  void Tape(int64_t k, const Values& state) {
    Values out;
    {
      ProfileScope scope("recompute");
      out = run_.RunStep(state, k);
      ++recomputed_;
    }
    BackStep(k, run_.Saved(std::move(out)));
  }

  void BackStep(int64_t k, Values saved) {
    Values in = std::move(saved);
    const int64_t num_state = run_.num_state;
    for (int64_t i = 0; i < num_state; ++i) {
      in.push_back(cot_state_[i].isTensor() ? cot_state_[i]
                                            : c10::IValue(run_.state_meta[i].Zeros()));
    }
    in.push_back(cot_losses_[k]);
    Values grads = run_.body->backward.Run(std::move(in));
    Values next(num_state);
    const auto& diff = run_.plan->body_differentiable_inputs;
    for (size_t j = 0; j < diff.size(); ++j) {
      const int64_t index = diff[j];
      if (index < num_state) {
        next[index] = std::move(grads[j]);
        continue;
      }
      at::Tensor g = grads[j].toTensor();
      at::Tensor& total = fixed_grads_[index - num_state];
      total = total.defined() ? total + g : g;
    }
    cot_state_ = std::move(next);
  }

  const LoopRun& run_;
  Values cot_state_;
  std::vector<at::Tensor> cot_losses_;
  bool keep_;
  std::vector<at::Tensor> fixed_grads_;
  int64_t recomputed_ = 0;
};

struct LoopNode : public torch::autograd::Function<LoopNode> {
  static variable_list forward(AutogradContext* ctx, c10::intrusive_ptr<LoopRun> run,
                               at::TensorList inputs) {
    const LoopSection& plan = *run->plan;
    run->num_inputs = static_cast<int64_t>(inputs.size());
    run->num_state = static_cast<int64_t>(plan.state_inputs.size());
    Values state;
    for (int64_t i = 0; i < run->num_state; ++i) {
      const at::Tensor& t = inputs[plan.state_inputs[i]];
      state.push_back(plan.state_zeros[i] ? at::zeros_like(t) : t);
      run->state_meta.emplace_back(t);
    }
    for (int64_t i : plan.fixed_inputs) run->fixed.push_back(inputs[i]);
    for (const at::Tensor& table : plan.per_step) {  // an artifact's are on the CPU
      run->tables.push_back(table.to(inputs[plan.state_inputs.at(0)].device()));
    }

    const int64_t steps = plan.steps;
    const int64_t num_state = run->num_state;
    std::vector<at::Tensor> losses;
    LoopSchedule& schedule = *run->schedule;
    schedule = LoopSchedule{};
    schedule.steps = steps;
    schedule.state_bytes = BytesOf(state);
    std::set<int64_t> chain;  // where the backward's first splits put snapshots
    for (int64_t k = 0; k < steps; ++k) {
      if (chain.count(k)) run->stored[k] = state;
      Values out = run->RunStep(state, k);
      if (k == 0) {
        schedule.saved_bytes_per_step = BytesOf(out, num_state + 1);
        run->loss_meta.emplace(out[num_state].toTensor());
        Decide(plan, &schedule);
        if (!schedule.store_all) {
          run->stored[0] = state;
          int64_t a = 0, left = steps, slots = schedule.snapshots;
          while (left >= 2 && slots >= 2) {
            const int64_t m = RevolveSplit(left, slots);
            a += m;
            left -= m;
            --slots;
            chain.insert(a);
          }
          const int64_t free_advances = chain.empty() ? 0 : *chain.rbegin();
          schedule.planned_recomputed_steps =
              MinimalAdvances(steps, schedule.snapshots) - free_advances + steps;
        }
      }
      losses.push_back(out[num_state].toTensor());
      if (schedule.store_all) {
        Values next(out.begin(), out.begin() + num_state);
        run->saved.push_back(run->Saved(std::move(out)));
        state = std::move(next);
      } else {
        state = run->NextState(std::move(out));
      }
    }
    variable_list results;
    for (int64_t i = 0; i < plan.num_results; ++i) results.push_back(state[i].toTensor());
    if (plan.return_losses) {
      for (at::Tensor& l : losses) results.push_back(l);
    }
    DetachResults(results, *run);
    ctx->saved_data["run"] = c10::IValue::make_capsule(run);
    return results;
  }

  // A kept value that is also a result gets this node as its grad_fn once
  // forward returns: keep a detached alias instead, or the node would own
  // itself through it.
  static void DetachResults(const variable_list& results, LoopRun& run) {
    std::set<const at::TensorImpl*> impls;
    for (const at::Tensor& r : results) impls.insert(r.unsafeGetTensorImpl());
    auto detach = [&](Values& values) {
      for (c10::IValue& v : values) {
        if (v.isTensor() && impls.count(v.toTensor().unsafeGetTensorImpl())) {
          v = v.toTensor().detach();
        }
      }
    };
    for (Values& s : run.saved) detach(s);
    for (auto& [k, s] : run.stored) detach(s);
    detach(run.fixed);
  }

  // The schedule's store_all and snapshots, from the plan's budget and the
  // bytes schedule already holds (a snapshot, one step's saved values).
  static void Decide(const LoopSection& plan, LoopSchedule* schedule) {
    const int64_t steps = plan.steps;
    const int64_t all_bytes = steps * schedule->saved_bytes_per_step;
    int64_t snapshots = 0;
    if (plan.memory_budget < 0) {
      snapshots = -1;
    } else if (plan.memory_budget == 0) {
      snapshots = AutoSnapshots(steps);
    } else if (all_bytes <= plan.memory_budget) {
      snapshots = -1;  // everything fits: nothing to recompute
    } else {
      const int64_t per_snapshot = std::max<int64_t>(schedule->state_bytes, 1);
      const int64_t fit = (plan.memory_budget - schedule->saved_bytes_per_step) / per_snapshot;
      TORCH_CHECK(fit >= 1, "compiled inner loop: `memory` of ", plan.memory_budget,
                  " bytes cannot hold one snapshot of the loop state (", schedule->state_bytes,
                  " bytes) and one step's saved values (", schedule->saved_bytes_per_step,
                  " bytes); give at least ",
                  schedule->state_bytes + schedule->saved_bytes_per_step,
                  " bytes, or memory=\"auto\"");
      snapshots = std::min(fit, steps);
    }
    schedule->store_all = snapshots < 0;
    schedule->snapshots = std::max<int64_t>(snapshots, 0);
    schedule->kept_bytes = schedule->store_all ? all_bytes
                                               : schedule->snapshots * schedule->state_bytes +
                                                     schedule->saved_bytes_per_step;
  }

  static variable_list backward(AutogradContext* ctx, variable_list cotangents) {
    TORCH_CHECK(!torch::autograd::GradMode::is_enabled(),
                "metafuse: the backward of a compiled inner loop is not differentiable "
                "(create_graph=True); take higher derivatives inside a compiled function "
                "(metafuse.compile with metafuse.grad), or use the eager path");
    TORCH_CHECK(ctx->saved_data.count("run"),
                "metafuse: trying to backward through a compiled inner loop a second time "
                "(its saved values were freed by the first backward); pass "
                "retain_graph=True to the first backward to keep them");
    auto run = c10::static_intrusive_pointer_cast<LoopRun>(ctx->saved_data["run"].toCapsule());
    const bool keep = torch::autograd::get_current_graph_task_keep_graph();
    if (!keep) ctx->saved_data.erase("run");
    const LoopSection& plan = *run->plan;
    const int64_t num_state = run->num_state;

    Values cot_state(num_state);
    for (int64_t i = 0; i < plan.num_results; ++i) {
      if (cotangents[i].defined()) cot_state[i] = cotangents[i];
    }
    std::vector<at::Tensor> cot_losses;
    for (int64_t k = 0; k < plan.steps; ++k) {
      const size_t at = plan.num_results + k;
      cot_losses.push_back(plan.return_losses && cotangents[at].defined()
                               ? cotangents[at]
                               : run->loss_meta->Zeros());
    }
    ReverseSweep sweep(*run, std::move(cot_state), std::move(cot_losses), keep);
    if (run->schedule->store_all) {
      sweep.StoredAll(run->saved);
    } else {
      Values start = run->stored.at(0);
      sweep.Reverse(0, plan.steps, run->schedule->snapshots, start, run->stored);
    }
    run->schedule->recomputed_steps = sweep.recomputed();

    variable_list result(1 + run->num_inputs);  // [run], then one per input
    for (int64_t i = 0; i < num_state; ++i) {
      if (plan.state_zeros[i] || !sweep.cot_state()[i].isTensor()) continue;
      at::Tensor& r = result[1 + plan.state_inputs[i]];
      const at::Tensor g = sweep.cot_state()[i].toTensor();
      r = r.defined() ? r + g : g;
    }
    for (size_t j = 0; j < plan.fixed_inputs.size(); ++j) {
      const at::Tensor& g = sweep.fixed_grads()[j];
      if (!g.defined()) continue;
      at::Tensor& r = result[1 + plan.fixed_inputs[j]];
      r = r.defined() ? r + g : g;
    }
    return result;
  }
};

}  // namespace

std::string LoopSchedule::Describe() const {
  std::ostringstream os;
  os << "loop: " << steps << " steps of the body";
  if (store_all) {
    os << "; every step's saved values kept (" << saved_bytes_per_step << " bytes a step, "
       << kept_bytes << " in all)";
  } else {
    os << "; binomial checkpointing: " << snapshots << " snapshots of the state ("
       << state_bytes << " bytes each), " << planned_recomputed_steps
       << " steps recomputed in the backward, " << kept_bytes << " bytes kept at most";
  }
  return os.str();
}

std::vector<at::Tensor> RunLoopDifferentiable(std::shared_ptr<const ExecutableProgram> body,
                                              std::shared_ptr<const LoopSection> loop,
                                              const std::vector<at::Tensor>& inputs,
                                              std::shared_ptr<LoopSchedule> schedule) {
  const LoopSection& plan = *loop;
  TORCH_CHECK(plan.steps >= 1, "compiled inner loop: steps must be >= 1");
  const int64_t num_state = static_cast<int64_t>(plan.state_inputs.size());
  const size_t body_inputs = num_state + plan.fixed_inputs.size() + plan.per_step.size();
  TORCH_CHECK(body->forward.num_inputs() == body_inputs, "compiled inner loop: the body takes ",
              body->forward.num_inputs(), " inputs, the loop gives it ", body_inputs);
  TORCH_CHECK(body->forward.num_outputs() >= static_cast<size_t>(num_state + 1),
              "compiled inner loop: the body returns ", body->forward.num_outputs(),
              " values, expected the next state (", num_state, "), the loss and saved values");
  TORCH_CHECK(plan.state_zeros.size() == plan.state_inputs.size(),
              "compiled inner loop: state_zeros and state_inputs differ in length");
  for (int64_t i : plan.state_inputs) {
    TORCH_CHECK(i >= 0 && i < static_cast<int64_t>(inputs.size()),
                "compiled inner loop: state input ", i, " out of range");
  }
  for (int64_t i : plan.fixed_inputs) {
    TORCH_CHECK(i >= 0 && i < static_cast<int64_t>(inputs.size()),
                "compiled inner loop: fixed input ", i, " out of range");
  }
  for (const at::Tensor& table : plan.per_step) {
    TORCH_CHECK(table.dim() >= 1 && table.size(0) >= plan.steps,
                "compiled inner loop: a per-step table has fewer rows than steps");
  }
  auto run = c10::make_intrusive<LoopRun>();
  run->body = std::move(body);
  run->plan = std::move(loop);
  run->schedule = schedule ? std::move(schedule) : std::make_shared<LoopSchedule>();
  return LoopNode::apply(run, at::TensorList(inputs));
}

}  // namespace metafuse::runtime
