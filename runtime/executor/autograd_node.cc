#include "runtime/executor/autograd_node.h"
#include "runtime/executor/loop_node.h"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/autograd/graph_task.h>

namespace metafuse::runtime {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Keeps the program alive inside the autograd graph (its backward must be
// the one of the forward that ran).
struct Holder : torch::CustomClassHolder {
  std::shared_ptr<const ExecutableProgram> program;
  std::vector<c10::IValue> forward_outputs;  // when the forward already ran
};

struct ProgramNode : public torch::autograd::Function<ProgramNode> {
  static variable_list forward(AutogradContext* ctx,
                               c10::intrusive_ptr<Holder> holder,
                               at::TensorList inputs) {
    const ExecutableProgram& fn = *holder->program;
    std::vector<c10::IValue> out = std::move(holder->forward_outputs);
    if (out.empty()) out = fn.forward.Run(std::vector<c10::IValue>(inputs.begin(), inputs.end()));
    variable_list results;
    for (int64_t i = 0; i < fn.num_outputs; ++i) results.push_back(out[i].toTensor());
    c10::impl::GenericList saved(c10::AnyType::get());
    for (size_t i = fn.num_outputs; i < out.size(); ++i) {
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
    c10::impl::GenericList devices(c10::DeviceObjType::get());
    for (const at::Tensor& r : results) {
      sizes.push_back(c10::IValue(r.sizes().vec()));
      dtypes.push_back(static_cast<int64_t>(r.scalar_type()));
      devices.push_back(r.device());
    }
    ctx->saved_data["output_sizes"] = sizes;
    ctx->saved_data["output_dtypes"] = dtypes;
    ctx->saved_data["output_devices"] = devices;
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
    const ExecutableProgram& fn = *holder->program;
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
    auto devices = ctx->saved_data["output_devices"].toList();
    for (size_t i = 0; i < cotangents.size(); ++i) {
      in.push_back(cotangents[i].defined()
                       ? cotangents[i]
                       : at::zeros(sizes.get(i).toIntVector(),
                                   at::TensorOptions()
                                       .dtype(static_cast<c10::ScalarType>(dtypes[i]))
                                       .device(devices.get(i).toDevice())));
    }
    std::vector<c10::IValue> grads = fn.backward.Run(std::move(in));
    const int64_t num_inputs = ctx->saved_data["num_inputs"].toInt();
    variable_list result(1 + num_inputs);  // [holder], then one per input
    const auto& diff = fn.differentiable_inputs;
    for (size_t k = 0; k < diff.size(); ++k) result[1 + diff[k]] = grads[k].toTensor();
    return result;
  }
};

}  // namespace

std::vector<at::Tensor> RunDifferentiable(std::shared_ptr<const ExecutableProgram> program,
                                          const std::vector<at::Tensor>& inputs,
                                          std::vector<c10::IValue> forward_outputs) {
  TORCH_CHECK(static_cast<int64_t>(inputs.size()) == program->num_inputs,
              "compiled program takes ", program->num_inputs, " tensors, got ", inputs.size());
  if (program->loop.steps > 0) {
    std::shared_ptr<const LoopSection> loop(program, &program->loop);  // shares ownership
    return RunLoopDifferentiable(std::move(program), std::move(loop), inputs);
  }
  auto holder = c10::make_intrusive<Holder>();
  holder->program = std::move(program);
  holder->forward_outputs = std::move(forward_outputs);
  return ProgramNode::apply(holder, at::TensorList(inputs));
}

}  // namespace metafuse::runtime
