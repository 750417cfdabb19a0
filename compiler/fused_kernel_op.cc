#include "compiler/fused_kernel_op.h"

#include <mutex>
#include <unordered_map>

#include <ATen/ATen.h>

#include "absl/container/inlined_vector.h"

#include "compiler/fusion_group.h"
#include "compiler/lower_fusion_group.h"
#include "compiler/plan_buffers.h"
#include "runtime/kernel_cache.h"
#include "runtime/llvm_codegen.h"

namespace metafuse::compiler {

namespace {

std::mutex registry_mutex;
FusedKernelStats registry_stats;

// The disk cache, if the per-user directory can be used; compiling without
// it is correct, only slower to start.
runtime::KernelCache* DiskCache() {
  static runtime::KernelCache* cache = [] {
    auto opened = runtime::KernelCache::Open();
    if (!opened.ok()) {
      TORCH_WARN("metafuse: kernel cache unavailable (", opened.status().ToString(),
                 "); compiling kernels without it");
      return static_cast<runtime::KernelCache*>(nullptr);
    }
    return opened->release();
  }();
  return cache;
}

// Kernels by printed IR: groups with the same structure share one.
std::shared_ptr<const runtime::CompiledKernel> GetKernel(const runtime::kir::Kernel& kernel) {
  static auto* registry =
      new std::unordered_map<std::string, std::shared_ptr<const runtime::CompiledKernel>>();
  const std::string key = runtime::kir::Print(kernel);
  std::lock_guard<std::mutex> lock(registry_mutex);
  if (auto it = registry->find(key); it != registry->end()) {
    ++registry_stats.kernels_from_memory;
    return it->second;
  }
  // One JIT for every fused kernel of the process: its setup is paid once.
  static std::shared_ptr<runtime::LlvmJit> jit;
  if (jit == nullptr) {
    auto created = runtime::LlvmJit::Create();
    TORCH_CHECK(created.ok(), "metafuse: cannot create the LLVM JIT: ",
                created.status().ToString());
    jit = std::shared_ptr<runtime::LlvmJit>(*std::move(created));
  }
  auto compiled = runtime::CompiledKernel::Create(kernel, DiskCache(), jit);
  TORCH_CHECK(compiled.ok(), "metafuse: compiling fused kernel ", kernel.name, " failed: ",
              compiled.status().ToString());
  ++((*compiled)->cache_hit() ? registry_stats.kernels_from_disk
                              : registry_stats.kernels_compiled);
  std::shared_ptr<const runtime::CompiledKernel> shared(std::move(*compiled));
  registry->emplace(key, shared);
  return shared;
}

struct Launch {
  std::shared_ptr<const runtime::CompiledKernel> kernel;
  FusedKernelPlan plan;
  int64_t segments = 1;
  size_t inputs_per_segment = 0, outputs_per_segment = 0;
  std::vector<int64_t> numel;  // per segment
  std::vector<std::vector<int64_t>> out_sizes;  // per segment
  std::vector<int64_t> reuse;  // per output over all segments: node input or -1
};

}  // namespace

FusedKernelStats GetFusedKernelStats() {
  std::lock_guard<std::mutex> lock(registry_mutex);
  return registry_stats;
}

torch::jit::Operation MakeFusedKernelOperation(torch::jit::Node* group) {
  auto plan = LowerFusionGroup(group);
  TORCH_CHECK(plan.ok(), "metafuse: cannot lower fusion group: ", plan.status().ToString(),
              "; its subgraph:\n", *group->g(torch::jit::attr::Subgraph));
  auto launch = std::make_shared<Launch>();
  launch->plan = *std::move(plan);
  launch->kernel = GetKernel(launch->plan.kernel);
  launch->segments = group->hasAttribute(SegmentsAttr()) ? group->i(SegmentsAttr()) : 1;
  const auto& sub = group->g(torch::jit::attr::Subgraph);
  launch->inputs_per_segment = sub->inputs().size();
  launch->outputs_per_segment = sub->outputs().size();
  for (int64_t s = 0; s < launch->segments; ++s) {
    auto type = group->output(s * launch->outputs_per_segment)->type()->expect<c10::TensorType>();
    launch->out_sizes.push_back(*type->sizes().concrete_sizes());
    launch->numel.push_back(*type->numel());
  }
  if (group->hasAttribute(ReuseAttr())) launch->reuse = group->is(ReuseAttr());
  // Profiles show the kernel (and its segment count) instead of the node kind.
  group->s_(torch::jit::attr::name,
            launch->plan.kernel.name.substr(0, 14) +
                (launch->segments > 1 ? "[x" + std::to_string(launch->segments) + "]" : ""));
  launch->reuse.resize(group->outputs().size(), -1);

  return [launch](torch::jit::Stack& stack) {
    const Launch& l = *launch;
    const FusedKernelPlan& p = l.plan;
    const size_t total_in = l.inputs_per_segment * l.segments;
    const size_t base = stack.size() - total_in;
    // On the stack for the usual sizes: a launch is a few microseconds.
    absl::InlinedVector<at::Tensor, 8> outputs(l.outputs_per_segment * l.segments);
    absl::InlinedVector<at::Tensor, 2> keep;  // contiguous copies, alive until the launch ends
    absl::InlinedVector<const void*, 16> in_ptrs(p.kernel.inputs.size());
    absl::InlinedVector<void*, 8> out_ptrs(l.outputs_per_segment);
    absl::InlinedVector<double, 4> scalars(p.kernel.scalars.size());
    for (int64_t s = 0; s < l.segments; ++s) {
      const size_t first = base + s * l.inputs_per_segment;
      for (size_t i = 0; i < l.inputs_per_segment; ++i) {
        c10::IValue& v = stack[first + i];
        if (p.is_tensor[i]) {
          at::Tensor t = v.toTensor();
          TORCH_CHECK(t.scalar_type() == p.input_dtypes[i] && t.device().is_cpu(),
                      "fused kernel ", p.kernel.name, ": input ", i, " is ",
                      t.toString(), ", expected the specialized dtype on the CPU");
          if (!t.is_contiguous()) {
            t = t.contiguous();
            keep.push_back(t);
          }
          in_ptrs[p.binding[i]] = t.data_ptr();
        } else {
          scalars[p.binding[i]] = v.toScalar().toDouble();
        }
      }
      for (size_t o = 0; o < l.outputs_per_segment; ++o) {
        const size_t index = s * l.outputs_per_segment + o;
        const int64_t from = l.reuse[index];
        at::Tensor out;
        if (from >= 0) {
          const at::Tensor& candidate = stack[base + from].toTensor();
          // Not taken twice: a taken input is no longer uniquely owned.
          if (BufferIsFree(candidate)) out = candidate;
        }
        if (!out.defined()) {
          out = at::empty(l.out_sizes[s], at::TensorOptions().dtype(p.output_dtypes[o]));
        }
        out_ptrs[o] = out.data_ptr();
        outputs[index] = std::move(out);
      }
      l.kernel->RunUnchecked(l.numel[s], in_ptrs.data(), out_ptrs.data(), scalars.data());
    }
    stack.resize(base);
    for (auto& out : outputs) stack.emplace_back(std::move(out));
  };
}

}  // namespace metafuse::compiler
