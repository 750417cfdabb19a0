#include "compiler/compiled_function.h"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/autograd/graph_task.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/passes/lower_tuples.h>
#include <torch/csrc/jit/passes/remove_mutation.h>

#include "compiler/autodiff.h"
#include "compiler/decompose.h"
#include "compiler/eliminate_optimizer_backward.h"
#include "compiler/grad_marker.h"
#include "compiler/lower_broadcast.h"
#include "compiler/lower_optimizer_ops.h"

namespace metafuse::compiler {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Keeps the compiled function alive inside the autograd graph.
struct Holder : torch::CustomClassHolder {
  std::shared_ptr<const CompiledFunction> function;
  // The specialized pair the forward ran (its backward must match it), or
  // null for the generic programs.
  std::shared_ptr<const SpecializedPair> pair;
};

struct ProgramNode : public torch::autograd::Function<ProgramNode> {
  static variable_list forward(AutogradContext* ctx,
                               c10::intrusive_ptr<Holder> holder,
                               at::TensorList inputs) {
    const CompiledFunction& fn = *holder->function;
    std::vector<c10::IValue> in(inputs.begin(), inputs.end());
    std::vector<c10::IValue> out;
    holder->pair = fn.PairFor(in, &out);
    if (out.empty()) {
      out = holder->pair ? holder->pair->forward->Run(std::move(in))
                         : fn.forward_program().Run(std::move(in));
    }
    variable_list results;
    for (int64_t i = 0; i < fn.num_outputs(); ++i) results.push_back(out[i].toTensor());
    c10::impl::GenericList saved(c10::AnyType::get());
    for (size_t i = fn.num_outputs(); i < out.size(); ++i) {
      // A saved value that is also an output gets that output's grad_fn (this
      // node) once forward returns: keep a detached alias instead, or the
      // node would own itself through it.
      if (out[i].isTensor()) {
        const at::TensorImpl* impl = out[i].toTensor().unsafeGetTensorImpl();
        for (const at::Tensor& r : results) {
          if (r.unsafeGetTensorImpl() == impl) {
            out[i] = out[i].toTensor().detach();
            break;
          }
        }
      }
      saved.push_back(out[i]);
    }
    ctx->saved_data["saved"] = saved;
    // Only the outputs' metadata (for zero cotangents): saving the outputs
    // themselves would make a reference cycle through their grad_fn.
    c10::impl::GenericList sizes(c10::ListType::ofInts());
    std::vector<int64_t> dtypes;
    for (const at::Tensor& r : results) {
      sizes.push_back(c10::IValue(r.sizes().vec()));
      dtypes.push_back(static_cast<int64_t>(r.scalar_type()));
    }
    ctx->saved_data["output_sizes"] = sizes;
    ctx->saved_data["output_dtypes"] = dtypes;
    ctx->saved_data["num_inputs"] = static_cast<int64_t>(inputs.size());
    ctx->saved_data["function"] = c10::IValue::make_capsule(holder);
    return results;
  }

  static variable_list backward(AutogradContext* ctx, variable_list cotangents) {
    // The compiled meta-backward is itself not recorded: a gradient taken
    // with create_graph=True would silently lose this node's share of every
    // higher derivative. Refuse instead.
    TORCH_CHECK(!torch::autograd::GradMode::is_enabled(),
                "metafuse: the backward of a compiled function is not differentiable "
                "(create_graph=True); take higher derivatives inside the compiled function "
                "(metafuse.compile with metafuse.grad), or use the eager path");
    auto holder = c10::static_intrusive_pointer_cast<Holder>(
        ctx->saved_data["function"].toCapsule());
    const CompiledFunction& fn = *holder->function;
    TORCH_CHECK(ctx->saved_data.count("saved"),
                "metafuse: trying to backward through a compiled function a second time "
                "(its saved values were freed by the first backward); pass "
                "retain_graph=True to the first backward to keep them");
    std::vector<c10::IValue> in;
    for (const auto& v : ctx->saved_data["saved"].toList()) in.push_back(v);
    // Unless the graph is kept for another backward, the program's registers
    // become the only owners of the saved values, so each is freed after its
    // last read instead of at the end of the backward.
    if (!torch::autograd::get_current_graph_task_keep_graph()) ctx->saved_data.erase("saved");
    auto sizes = ctx->saved_data["output_sizes"].toList();
    auto dtypes = ctx->saved_data["output_dtypes"].toIntVector();
    for (size_t i = 0; i < cotangents.size(); ++i) {
      in.push_back(cotangents[i].defined()
                       ? cotangents[i]
                       : at::zeros(sizes.get(i).toIntVector(),
                                   at::TensorOptions().dtype(
                                       static_cast<c10::ScalarType>(dtypes[i]))));
    }
    std::vector<c10::IValue> grads = holder->pair ? holder->pair->backward->Run(std::move(in))
                                                  : fn.backward_program().Run(std::move(in));
    const int64_t num_inputs = ctx->saved_data["num_inputs"].toInt();
    variable_list result(1 + num_inputs);  // [holder], then one per input
    const auto& diff = fn.differentiable_inputs();
    for (size_t k = 0; k < diff.size(); ++k) result[1 + diff[k]] = grads[k].toTensor();
    return result;
  }
};

}  // namespace

void PrepareCapturedGraph(const std::shared_ptr<torch::jit::Graph>& graph,
                          StageLog* log) {
  torch::jit::Inline(*graph);
  torch::jit::LowerAllTuples(graph);  // a tuple of results -> one output each
  torch::jit::RemoveTensorMutation(graph);
  if (log) log->Record("captured", *graph);
  LowerOptimizerOps(graph);
  LowerBroadcastTensors(graph);
  std::string names;
  for (const auto& name : DecomposeToPrimitives(graph)) {
    // Gradient markers are expanded below, once everything they
    // differentiate is in the primitive set.
    if (name == "metafuse::grad") continue;
    names += (names.empty() ? "" : ", ") + name;
  }
  if (!names.empty()) throw UnsupportedOp(names);
  EliminateOptimizerBackwardStage(graph, log);  // before any differentiation
  ExpandGradMarkers(graph);
  CleanUp(graph);
  if (log) log->Record("decomposed", *graph);
}

std::shared_ptr<CompiledFunction> CompiledFunction::Build(
    const std::shared_ptr<torch::jit::Graph>& program,
    const std::vector<int64_t>& differentiable_inputs, StageLog* log) {
  auto fn = std::shared_ptr<CompiledFunction>(new CompiledFunction());
  fn->split_ = BuildMetaBackward(program, differentiable_inputs, log);
  fn->log_ = log;
  fn->fusion_ = FusionEnabledByDefault();
  return fn;
}

const runtime::Program& CompiledFunction::forward_program() const {
  std::call_once(forward_once_, [this] {
    forward_ = std::make_unique<runtime::Program>(split_.forward, "forward");
  });
  return *forward_;
}

const runtime::Program& CompiledFunction::backward_program() const {
  std::call_once(backward_once_, [this] {
    backward_ = std::make_unique<runtime::Program>(split_.backward, "backward");
  });
  return *backward_;
}

void CompiledFunction::set_fusion(bool enabled) {
  std::lock_guard<std::mutex> lock(mu_);
  fusion_ = enabled;
}

bool CompiledFunction::fusion() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fusion_;
}

std::shared_ptr<const SpecializedPair> CompiledFunction::last_pair() const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto* last = pairs_.last();
  return last != nullptr ? *last : nullptr;
}

std::shared_ptr<const SpecializedPair> CompiledFunction::PairFor(
    const std::vector<c10::IValue>& inputs, std::vector<c10::IValue>* first_outputs) const {
  if (!fusion()) return nullptr;  // before computing any signature
  std::vector<int64_t> signature = InputSignature(inputs);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (const auto* found = pairs_.Find(signature)) return *found;
    if (pairs_.full()) return nullptr;
  }
  std::shared_ptr<const SpecializedPair> pair =
      SpecializePair(split_, inputs, log_, first_outputs);
  std::lock_guard<std::mutex> lock(mu_);
  return pairs_.Insert(std::move(signature), std::move(pair));
}

std::vector<at::Tensor> CompiledFunction::operator()(
    const std::vector<at::Tensor>& inputs) const {
  const size_t expected = split_.forward->inputs().size();
  TORCH_CHECK(inputs.size() == expected, "compiled function takes ", expected,
              " tensors, got ", inputs.size());
  auto holder = c10::make_intrusive<Holder>();
  holder->function = shared_from_this();
  return ProgramNode::apply(holder, at::TensorList(inputs));
}

}  // namespace metafuse::compiler
