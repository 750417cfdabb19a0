#include "runtime/executor/fused_kernel_launch.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/DeviceGuard.h>

#include "absl/container/inlined_vector.h"
#include "runtime/compute/buffer_ownership.h"
#include "runtime/jit/cpp_kernel_library.h"
#include "runtime/jit/host_backend.h"
#include "runtime/cuda/cuda_fused_kernel.h"
#include "runtime/jit/jit_kernel.h"
#include "runtime/base/kernel_cache.h"
#include "runtime/executor/kernel_target.h"
#include "runtime/compute/max_pool.h"
#include "runtime/executor/reducing_launch.h"

namespace metafuse::runtime {
namespace {

std::mutex registry_mutex;
FusedKernelStats registry_stats;

KernelCache* DiskCache() { return ProcessKernelCache(); }

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

// CUDA kernels by source: compiled and loaded per device on first launch.
std::shared_ptr<const CudaFusedKernel> GetCudaKernel(const KernelCode& code) {
  static auto* registry =
      new std::unordered_map<std::string, std::shared_ptr<const CudaFusedKernel>>();
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto it = registry->find(code.cuda_source);
  if (it == registry->end()) {
    it = registry->emplace(code.cuda_source, std::make_shared<CudaFusedKernel>(code, DiskCache()))
             .first;
  }
  return it->second;
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

// Output `o` of segment `s` (`index` over all segments): the buffer of the
// input planning named, when it is uniquely owned, on `device` and in the
// layout the kernel writes; else a fresh one on `device`.
at::Tensor OutputBuffer(const torch::jit::Stack& stack, size_t base, const LaunchPlan& p,
                        int64_t s, size_t o, size_t index,
                        const c10::optional<std::vector<int64_t>>& layout, c10::Device device) {
  const int64_t from = p.reuse[index];
  if (from >= 0) {
    const at::Tensor& candidate = stack[base + from].toTensor();
    // Not taken twice: a taken input is no longer uniquely owned.
    const bool same_layout = layout ? candidate.strides() == c10::IntArrayRef(*layout)
                                    : candidate.is_contiguous();
    if (same_layout && candidate.device() == device && BufferIsFree(candidate)) {
      return candidate;
    }
  }
  const auto options = at::TensorOptions().dtype(p.output_dtypes[o]).device(device);
  return layout ? at::empty_strided(p.out_sizes[s], *layout, options)
                : at::empty(p.out_sizes[s], options);
}

struct Launch {
  std::shared_ptr<const JitKernel> kernel;       // a program compiled for the CPU
  std::shared_ptr<const CudaFusedKernel> cuda;   // one compiled for CUDA tensors
  const KernelCode* code = nullptr;              // owned by one of the two
  LaunchPlan plan;
  size_t inputs_per_segment = 0, outputs_per_segment = 0;
  size_t num_kernel_inputs = 0, num_scalars = 0;
};

// The device a launch runs on: its first tensor input's (a CUDA one if any,
// since 0-dim CPU tensors may ride along with CUDA work).
c10::Device LaunchDevice(const torch::jit::Stack& stack, size_t base, const LaunchPlan& p) {
  c10::optional<c10::Device> first;
  for (size_t i = base; i < stack.size(); ++i) {
    if (!p.is_tensor[(i - base) % p.binding.size()]) continue;
    const c10::Device d = stack[i].toTensor().device();
    if (!d.is_cpu()) return d;
    if (!first) first = d;
  }
  return first.value_or(c10::Device(c10::kCPU));
}

// The CUDA launch of one instruction: every segment enqueued on the current
// stream of `device`, no host synchronization. A 0-dim CPU tensor (a traced
// Python number) is copied to the device; any other CPU input is an error.
void RunOnCuda(const Launch& l, torch::jit::Stack& stack, size_t base, c10::Device device) {
  const LaunchPlan& p = l.plan;
  const KernelCode& code = *l.code;
  c10::DeviceGuard guard(device);
  absl::InlinedVector<at::Tensor, 8> outputs(l.outputs_per_segment * p.segments);
  absl::InlinedVector<at::Tensor, 2> keep;  // copies, alive until every launch is enqueued
  absl::InlinedVector<const void*, 16> in_ptrs(l.num_kernel_inputs);
  absl::InlinedVector<void*, 8> out_ptrs(l.outputs_per_segment);
  absl::InlinedVector<double, 4> scalars(l.num_scalars);
  for (int64_t s = 0; s < p.segments; ++s) {
    const size_t first = base + s * l.inputs_per_segment;
    const auto layout = SharedDenseStrides(stack, first, p, code, p.out_sizes[s]);
    for (size_t i = 0; i < l.inputs_per_segment; ++i) {
      c10::IValue& v = stack[first + i];
      if (!p.is_tensor[i]) {
        scalars[p.binding[i]] = v.toScalar().toDouble();
        continue;
      }
      at::Tensor t = v.toTensor();
      TORCH_CHECK(t.scalar_type() == p.input_dtypes[i], "fused kernel ", code.name,
                  ": input ", i, " is ", t.toString(), ", expected dtype ",
                  p.input_dtypes[i]);
      if (t.device() != device) {
        TORCH_CHECK(t.is_cpu() && t.dim() == 0, "fused kernel ", code.name, ": input ", i,
                    " is on ", t.device().str(), ", the launch on ", device.str(),
                    "; expected every tensor on ", device.str());
        t = t.to(device, /*non_blocking=*/false);
        keep.push_back(t);
      }
      if (!layout && !t.is_contiguous()) {
        t = t.contiguous();
        keep.push_back(t);
      }
      in_ptrs[p.binding[i]] = t.data_ptr();
    }
    for (size_t o = 0; o < l.outputs_per_segment; ++o) {
      const size_t index = s * l.outputs_per_segment + o;
      at::Tensor out = OutputBuffer(stack, base, p, s, o, index, layout, device);
      out_ptrs[o] = out.data_ptr();
      outputs[index] = std::move(out);
    }
    const absl::Status launched =
        l.cuda->Launch(device, p.numel[s], in_ptrs.data(), out_ptrs.data(), scalars.data());
    TORCH_CHECK(launched.ok(), "metafuse: ", launched.ToString());
  }
  stack.resize(base);
  for (auto& out : outputs) stack.emplace_back(std::move(out));
}

// Binds one segment's inputs (from stack[first]) of a host launch: tensor
// pointers and scalar values. Inputs are checked, and made contiguous
// unless `any_layout` (the launch runs over a shared memory order).
void BindHostInputs(const Launch& l, torch::jit::Stack& stack, size_t first, bool any_layout,
                    const void** in_ptrs, double* scalars,
                    absl::InlinedVector<at::Tensor, 2>* keep) {
  const LaunchPlan& p = l.plan;
  for (size_t i = 0; i < l.inputs_per_segment; ++i) {
    c10::IValue& v = stack[first + i];
    if (!p.is_tensor[i]) {
      scalars[p.binding[i]] = v.toScalar().toDouble();
      continue;
    }
    at::Tensor t = v.toTensor();
    TORCH_CHECK(t.scalar_type() == p.input_dtypes[i] && t.device().is_cpu(), "fused kernel ",
                l.kernel->code().name, ": input ", i, " is ", t.toString(),
                ", expected the specialized dtype on the CPU");
    if (!any_layout && !t.is_contiguous()) {
      t = t.contiguous();
      keep->push_back(t);
    }
    in_ptrs[p.binding[i]] = t.data_ptr();
  }
}

// The host launch of a kernel that sums some of its outputs
// (runtime/executor/reducing_launch.h): one segment, inputs in their logical order
// (the reductions address elements by loop index), scratch outputs
// undefined on the stack, then one tensor per reduction.
void RunReducingOnHost(const Launch& l, torch::jit::Stack& stack, size_t base) {
  const LaunchPlan& p = l.plan;
  absl::InlinedVector<at::Tensor, 8> outputs(l.outputs_per_segment);
  absl::InlinedVector<at::Tensor, 2> keep;
  absl::InlinedVector<const void*, 16> in_ptrs(l.num_kernel_inputs);
  absl::InlinedVector<void*, 8> out_ptrs(l.outputs_per_segment, nullptr);
  absl::InlinedVector<double, 4> scalars(l.num_scalars);
  BindHostInputs(l, stack, base, /*any_layout=*/false, in_ptrs.data(), scalars.data(), &keep);
  const size_t whole = l.outputs_per_segment - static_cast<size_t>(p.scratch);
  for (size_t o = 0; o < whole; ++o) {
    outputs[o] = OutputBuffer(stack, base, p, 0, o, o, c10::nullopt, c10::kCPU);
    out_ptrs[o] = outputs[o].data_ptr();
  }
  std::vector<at::Tensor> sums =
      RunReducing(*l.kernel, p.numel[0], in_ptrs.data(), out_ptrs.data(), scalars.data(),
                  p.output_dtypes, p.reductions);
  stack.resize(base);
  for (auto& out : outputs) stack.emplace_back(std::move(out));
  for (auto& sum : sums) stack.emplace_back(std::move(sum));
}

// The host launch of a kernel whose one output is max-pooled as it is
// computed (LaunchPlan::pool): each thread computes a block of whole planes
// into a buffer it keeps (cache-resident) and pools them from there, so the
// output is never written to memory nor read back (a conv net's BatchNorm +
// ReLU before max-pooling: 15 MB per query activation). Stack: an undefined
// tensor for the output, then the pooled values and their indices.
void RunPooledOnHost(const Launch& l, torch::jit::Stack& stack, size_t base) {
  const LaunchPlan& p = l.plan;
  absl::InlinedVector<at::Tensor, 2> keep;
  absl::InlinedVector<const void*, 16> in_ptrs(l.num_kernel_inputs);
  absl::InlinedVector<double, 4> scalars(l.num_scalars);
  BindHostInputs(l, stack, base, /*any_layout=*/false, in_ptrs.data(), scalars.data(), &keep);
  const std::vector<int64_t>& sizes = p.out_sizes[0];
  const size_t dims = sizes.size();
  const int64_t kh = p.pool[0], kw = p.pool[1];
  const int64_t height = sizes[dims - 2], width = sizes[dims - 1];
  const int64_t plane = height * width, planes = p.numel[0] / plane;
  std::vector<int64_t> pooled = sizes;
  pooled[dims - 2] = height / kh, pooled[dims - 1] = width / kw;
  const int64_t pooled_plane = pooled[dims - 2] * pooled[dims - 1];
  const bool is_float = p.output_dtypes[0] == at::kFloat;
  at::Tensor values = at::empty(pooled, at::TensorOptions().dtype(p.output_dtypes[0]));
  at::Tensor indices = at::empty(pooled, at::TensorOptions().dtype(at::kLong));
  void* const out_base = values.data_ptr();
  int64_t* const index_base = indices.data_ptr<int64_t>();
  const size_t element = is_float ? sizeof(float) : sizeof(double);
  // Planes per block: about 16K elements, in L1/L2 while they are pooled.
  const int64_t block = std::max<int64_t>(1, (int64_t{1} << 14) / plane);
  JitKernel::Fn fn = l.kernel->function();
  void* const* in = const_cast<void* const*>(in_ptrs.data());
  at::parallel_for(0, planes, std::max<int64_t>(block, (int64_t{1} << 15) / plane),
                   [&](int64_t begin, int64_t end) {
    thread_local std::vector<double> buffer;  // doubles: room for either dtype
    buffer.resize(static_cast<size_t>(block * plane));
    for (int64_t p0 = begin; p0 < end; p0 += block) {
      const int64_t p1 = std::min(end, p0 + block), b0 = p0 * plane;
      // The kernel writes out[i] for i in [b0, b1): the buffer less b0 elements.
      void* out = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(buffer.data()) -
                                          static_cast<uintptr_t>(b0) * element);
      fn(b0, p1 * plane, in, &out, scalars.data());
      int64_t* index = index_base + p0 * pooled_plane;
      if (is_float) {
        MaxPoolPlanes(reinterpret_cast<const float*>(buffer.data()), p1 - p0, height, width, kh,
                      kw, static_cast<float*>(out_base) + p0 * pooled_plane, index);
      } else {
        MaxPoolPlanes(buffer.data(), p1 - p0, height, width, kh, kw,
                      static_cast<double*>(out_base) + p0 * pooled_plane, index);
      }
    }
  });
  stack.resize(base);
  stack.emplace_back(at::Tensor());
  stack.emplace_back(std::move(values));
  stack.emplace_back(std::move(indices));
}

}  // namespace

FusedKernelStats GetFusedKernelStats() {
  std::lock_guard<std::mutex> lock(registry_mutex);
  return registry_stats;
}


std::string KernelObjectCode(const KernelCode& code) {
  TORCH_CHECK(!code.llvm_ir.empty(), "metafuse: kernel ", code.name,
              " was compiled for CUDA tensors and has no host object code; ahead-of-time "
              "artifacts hold programs compiled for the CPU");
  return GetKernel(code, HostBackend::kLlvm)->object_code();
}

void LoadKernels(const ProgramCode& code) {
  // Host kernels only (LLVM IR marks them): CUDA kernels are compiled for a
  // device's architecture on their first launch.
  std::vector<const KernelCode*> host;
  for (const KernelCode& kernel : code.kernels) {
    if (!kernel.llvm_ir.empty()) host.push_back(&kernel);
  }
  if (host.empty()) return;
  const HostBackend backend = Backend();
  if (backend == HostBackend::kLlvm) {
    for (const KernelCode* kernel : host) GetKernel(*kernel, backend);
    return;
  }
  // C++: the missing kernels of the program compiled together (one compiler run).
  std::lock_guard<std::mutex> lock(registry_mutex);
  std::vector<const KernelCode*> missing;
  for (const KernelCode* kernel : host) {
    if (!Kernels().count(RegistryKey(backend, *kernel))) missing.push_back(kernel);
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
  // A program holds the code of the device kind it was specialized for:
  // LLVM IR for the CPU, CUDA source for CUDA tensors.
  if (!code.llvm_ir.empty()) {
    launch->kernel = GetKernel(code, Backend());
    launch->code = &launch->kernel->code();
  } else {
    TORCH_CHECK(!code.cuda_source.empty(), "metafuse: fused kernel ", code.name,
                " has neither LLVM IR nor CUDA source");
    launch->cuda = GetCudaKernel(code);
    launch->code = &launch->cuda->code();
  }
  launch->inputs_per_segment = plan.binding.size();
  launch->outputs_per_segment = plan.output_dtypes.size();
  launch->num_kernel_inputs = code.input_dtypes.size();
  launch->num_scalars = static_cast<size_t>(code.num_scalars);
  launch->plan.reuse.resize(launch->outputs_per_segment * plan.segments, -1);
  TORCH_CHECK(plan.reductions.empty() ||
                  (plan.segments == 1 && code.cuda_source.empty() && plan.scratch >= 0 &&
                   static_cast<size_t>(plan.scratch) <= launch->outputs_per_segment),
              "metafuse: launch plan of kernel ", code.name,
              ": reductions need one segment of a host kernel");
  TORCH_CHECK(plan.pool.empty() ||
                  (plan.pool.size() == 2 && plan.pool[0] >= 1 && plan.pool[1] >= 1 &&
                   plan.segments == 1 && plan.reductions.empty() && code.cuda_source.empty() &&
                   launch->outputs_per_segment == 1 && plan.out_sizes[0].size() >= 2 &&
                   plan.out_sizes[0].end()[-2] >= plan.pool[0] &&
                   plan.out_sizes[0].end()[-1] >= plan.pool[1] &&
                   (plan.output_dtypes[0] == at::kFloat || plan.output_dtypes[0] == at::kDouble)),
              "metafuse: launch plan of kernel ", code.name,
              ": max-pooling needs one float32/float64 output of [..., H, W] planes at least the "
              "window, in one segment of a host kernel without reductions");

  return [launch](torch::jit::Stack& stack) {
    const Launch& l = *launch;
    const LaunchPlan& p = l.plan;
    const size_t total_in = l.inputs_per_segment * p.segments;
    const size_t base = stack.size() - total_in;
    const c10::Device device = LaunchDevice(stack, base, p);
    if (!(device.is_cpu() && l.kernel)) {
      auto target = KernelTargetFor(*l.code, device, BuiltKernelBackends());
      TORCH_CHECK(target.ok(), "metafuse: ", target.status().message());
      if (*target == KernelTarget::kCuda) return RunOnCuda(l, stack, base, device);
    }
    if (!p.reductions.empty()) return RunReducingOnHost(l, stack, base);
    if (!p.pool.empty()) return RunPooledOnHost(l, stack, base);
    // On the stack for the usual sizes: a launch is a few microseconds.
    absl::InlinedVector<at::Tensor, 8> outputs(l.outputs_per_segment * p.segments);
    absl::InlinedVector<at::Tensor, 2> keep;  // contiguous copies, alive until the launch ends
    absl::InlinedVector<const void*, 16> in_ptrs(l.num_kernel_inputs);
    absl::InlinedVector<void*, 8> out_ptrs(l.outputs_per_segment);
    absl::InlinedVector<double, 4> scalars(l.num_scalars);
    for (int64_t s = 0; s < p.segments; ++s) {
      const size_t first = base + s * l.inputs_per_segment;
      const auto layout = SharedDenseStrides(stack, first, p, l.kernel->code(), p.out_sizes[s]);
      BindHostInputs(l, stack, first, layout.has_value(), in_ptrs.data(), scalars.data(), &keep);
      for (size_t o = 0; o < l.outputs_per_segment; ++o) {
        const size_t index = s * l.outputs_per_segment + o;
        at::Tensor out = OutputBuffer(stack, base, p, s, o, index, layout, c10::kCPU);
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
