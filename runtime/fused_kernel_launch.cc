#include "runtime/fused_kernel_launch.h"

#include <mutex>
#include <unordered_map>

#include <ATen/ATen.h>

#include "absl/container/inlined_vector.h"
#include "runtime/buffer_ownership.h"
#include "runtime/cpp_kernel_library.h"
#include "runtime/host_backend.h"
#include "runtime/jit_kernel.h"
#include "runtime/kernel_cache.h"

namespace metafuse::runtime {
namespace {

std::mutex registry_mutex;
FusedKernelStats registry_stats;

// The disk cache, if the per-user directory can be used; compiling without
// it is correct, only slower to start.
KernelCache* DiskCache() {
  static KernelCache* cache = [] {
    auto opened = KernelCache::Open();
    if (!opened.ok()) {
      TORCH_WARN("metafuse: kernel cache unavailable (", opened.status().ToString(),
                 "); compiling kernels without it");
      return static_cast<KernelCache*>(nullptr);
    }
    return opened->release();
  }();
  return cache;
}

HostBackend Backend() {
  auto backend = SelectedHostBackend();
  TORCH_CHECK(backend.ok(), "metafuse: ", backend.status().message());
  return *backend;
}

// Kernels by back end and code: launches of the same kernel share one.
using Registry = std::unordered_map<std::string, std::shared_ptr<const JitKernel>>;
Registry& Kernels() {  // guarded by registry_mutex
  static auto* registry = new Registry();
  return *registry;
}
std::string RegistryKey(HostBackend backend, const KernelCode& code) {
  return backend == HostBackend::kLlvm ? "llvm\n" + code.llvm_ir : "cpp\n" + code.kernel_ir;
}

// Under registry_mutex.
std::shared_ptr<const JitKernel> CompileWithLlvm(const KernelCode& code) {
  // One JIT for every fused kernel of the process: its setup is paid once.
  static std::shared_ptr<LlvmJit> jit;
  if (jit == nullptr) {
    auto created = LlvmJit::Create();
    TORCH_CHECK(created.ok(), "metafuse: cannot create the LLVM JIT: ",
                created.status().ToString());
    jit = std::shared_ptr<LlvmJit>(*std::move(created));
  }
  auto compiled = JitKernel::Create(code, DiskCache(), jit);
  TORCH_CHECK(compiled.ok(), "metafuse: compiling fused kernel ", code.name, " failed: ",
              compiled.status().ToString());
  ++(!code.object_code.empty() ? registry_stats.kernels_from_artifact
     : (*compiled)->cache_hit() ? registry_stats.kernels_from_disk
                                : registry_stats.kernels_compiled);
  std::shared_ptr<const JitKernel> shared(std::move(*compiled));
  Kernels().emplace(RegistryKey(HostBackend::kLlvm, code), shared);
  return shared;
}

// Registers `kernels` through one shared object: `carrier`'s (an artifact's)
// when it has one, else printed and compiled (or from the disk cache). Under
// registry_mutex.
void RegisterWithCpp(const std::vector<const KernelCode*>& kernels, const ProgramCode* carrier) {
  const bool from_artifact = carrier != nullptr && !carrier->shared_object.empty();
  auto library = from_artifact ? LoadCppKernelLibrary(kernels, carrier->shared_object,
                                                      carrier->shared_object_target)
                               : BuildCppKernelLibrary(kernels, DiskCache());
  TORCH_CHECK(library.ok(), "metafuse: the C++ back end cannot load fused kernel ",
              kernels.at(0)->name, from_artifact ? " from the artifact" : "", ": ",
              library.status().message());
  ++(from_artifact ? registry_stats.libraries_from_artifact
     : library->cache_hit ? registry_stats.libraries_from_disk
                          : registry_stats.libraries_compiled);
  for (const KernelCode* code : kernels) {
    const std::string key = RegistryKey(HostBackend::kCpp, *code);
    if (Kernels().count(key)) continue;
    auto kernel = JitKernel::FromLibrary(*code, *library);
    TORCH_CHECK(kernel.ok(), "metafuse: ", kernel.status().message());
    ++(from_artifact ? registry_stats.kernels_from_artifact
       : library->cache_hit ? registry_stats.kernels_from_disk
                            : registry_stats.kernels_compiled);
    Kernels().emplace(key, std::shared_ptr<const JitKernel>(std::move(*kernel)));
  }
}

std::shared_ptr<const JitKernel> GetKernel(const KernelCode& code, HostBackend backend) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  const std::string key = RegistryKey(backend, code);
  if (auto it = Kernels().find(key); it != Kernels().end()) {
    ++registry_stats.kernels_from_memory;
    return it->second;
  }
  if (backend == HostBackend::kLlvm) return CompileWithLlvm(code);
  RegisterWithCpp({&code}, nullptr);
  return Kernels().at(key);
}

// Elementwise work does not care in which order it visits elements. When
// every element-indexed input of a segment is the same dense but
// non-contiguous layout (e.g. the task-major views metafuse.vmap's batching
// rules make of channel-major convolution outputs), the kernel runs over
// memory order and the outputs take that layout, as ATen's TensorIterator
// does: no copy in, none out. Inputs indexed by position (inner / outer
// broadcasts) need the logical order and make the launch contiguous.
c10::optional<std::vector<int64_t>> SharedDenseStrides(const torch::jit::Stack& stack,
                                                       size_t first, const LaunchPlan& p,
                                                       const KernelCode& code,
                                                       const std::vector<int64_t>& sizes) {
  c10::optional<std::vector<int64_t>> strides;
  bool any_permuted = false;
  for (size_t i = 0; i < p.binding.size(); ++i) {
    if (!p.is_tensor[i]) continue;
    const int64_t access = code.input_access.at(p.binding[i]);
    if (access == 1) continue;  // broadcast: one element, any layout
    if (access != 0) return c10::nullopt;
    const at::Tensor& t = stack[first + i].toTensor();
    if (t.sizes() != c10::IntArrayRef(sizes) || !t.is_non_overlapping_and_dense())
      return c10::nullopt;
    if (!strides) {
      strides = t.strides().vec();
    } else if (t.strides() != c10::IntArrayRef(*strides)) {
      return c10::nullopt;
    }
    any_permuted = any_permuted || !t.is_contiguous();
  }
  if (!any_permuted) return c10::nullopt;
  return strides;
}

struct Launch {
  std::shared_ptr<const JitKernel> kernel;
  LaunchPlan plan;
  size_t inputs_per_segment = 0, outputs_per_segment = 0;
  size_t num_kernel_inputs = 0, num_scalars = 0;
};

}  // namespace

FusedKernelStats GetFusedKernelStats() {
  std::lock_guard<std::mutex> lock(registry_mutex);
  return registry_stats;
}

KernelCache* ProcessKernelCache() { return DiskCache(); }

std::string KernelObjectCode(const KernelCode& code) {
  return GetKernel(code, HostBackend::kLlvm)->object_code();
}

void LoadKernels(const ProgramCode& code) {
  if (code.kernels.empty()) return;
  const HostBackend backend = Backend();
  if (backend == HostBackend::kLlvm) {
    for (const KernelCode& kernel : code.kernels) GetKernel(kernel, backend);
    return;
  }
  // C++: the missing kernels of the program compiled together (one compiler run).
  std::lock_guard<std::mutex> lock(registry_mutex);
  std::vector<const KernelCode*> missing;
  for (const KernelCode& kernel : code.kernels) {
    if (!Kernels().count(RegistryKey(backend, kernel))) missing.push_back(&kernel);
  }
  if (!missing.empty()) RegisterWithCpp(missing, &code);
}

torch::jit::Operation MakeFusedKernelLaunch(const KernelCode& code, const LaunchPlan& plan) {
  TORCH_CHECK(plan.segments >= 1 && plan.numel.size() == static_cast<size_t>(plan.segments) &&
                  plan.out_sizes.size() == static_cast<size_t>(plan.segments) &&
                  plan.is_tensor.size() == plan.binding.size() &&
                  plan.input_dtypes.size() == plan.binding.size(),
              "metafuse: launch plan of kernel ", code.name, " is inconsistent");
  auto launch = std::make_shared<Launch>();
  launch->plan = plan;
  launch->kernel = GetKernel(code, Backend());
  launch->inputs_per_segment = plan.binding.size();
  launch->outputs_per_segment = plan.output_dtypes.size();
  launch->num_kernel_inputs = code.input_dtypes.size();
  launch->num_scalars = static_cast<size_t>(code.num_scalars);
  launch->plan.reuse.resize(launch->outputs_per_segment * plan.segments, -1);

  return [launch](torch::jit::Stack& stack) {
    const Launch& l = *launch;
    const LaunchPlan& p = l.plan;
    const size_t total_in = l.inputs_per_segment * p.segments;
    const size_t base = stack.size() - total_in;
    // On the stack for the usual sizes: a launch is a few microseconds.
    absl::InlinedVector<at::Tensor, 8> outputs(l.outputs_per_segment * p.segments);
    absl::InlinedVector<at::Tensor, 2> keep;  // contiguous copies, alive until the launch ends
    absl::InlinedVector<const void*, 16> in_ptrs(l.num_kernel_inputs);
    absl::InlinedVector<void*, 8> out_ptrs(l.outputs_per_segment);
    absl::InlinedVector<double, 4> scalars(l.num_scalars);
    for (int64_t s = 0; s < p.segments; ++s) {
      const size_t first = base + s * l.inputs_per_segment;
      const auto layout = SharedDenseStrides(stack, first, p, l.kernel->code(), p.out_sizes[s]);
      for (size_t i = 0; i < l.inputs_per_segment; ++i) {
        c10::IValue& v = stack[first + i];
        if (p.is_tensor[i]) {
          at::Tensor t = v.toTensor();
          TORCH_CHECK(t.scalar_type() == p.input_dtypes[i] && t.device().is_cpu(),
                      "fused kernel ", l.kernel->code().name, ": input ", i, " is ",
                      t.toString(), ", expected the specialized dtype on the CPU");
          if (!layout && !t.is_contiguous()) {
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
        const int64_t from = p.reuse[index];
        at::Tensor out;
        if (from >= 0) {
          const at::Tensor& candidate = stack[base + from].toTensor();
          // Not taken twice: a taken input is no longer uniquely owned. Its
          // layout must be the one the kernel writes in.
          const bool same_layout = layout ? candidate.strides() == c10::IntArrayRef(*layout)
                                          : candidate.is_contiguous();
          if (same_layout && BufferIsFree(candidate)) out = candidate;
        }
        if (!out.defined()) {
          const auto options = at::TensorOptions().dtype(p.output_dtypes[o]);
          out = layout ? at::empty_strided(p.out_sizes[s], *layout, options)
                       : at::empty(p.out_sizes[s], options);
        }
        out_ptrs[o] = out.data_ptr();
        outputs[index] = std::move(out);
      }
      l.kernel->RunUnchecked(p.numel[s], in_ptrs.data(), out_ptrs.data(), scalars.data());
    }
    stack.resize(base);
    for (auto& out : outputs) stack.emplace_back(std::move(out));
  };
}

}  // namespace metafuse::runtime
