// A fused JIT kernel (compiler/codegen/llvm_printer + runtime/jit/jit_kernel) against the same computation as
// separate ATen ops, in one run: an Adam-like update of 4M float32 elements
//   m' = b1 m + (1 - b1) g
//   v' = b2 v + (1 - b2) g g
//   p' = p - lr m' / (sqrt(v') + eps)
// Baselines: eager out-of-place ATen (10 ops, temporaries, as an unfused
// compiled program would run it) and eager in-place ATen (the torch.optim
// style, 6 ops). Also prints compile times (cold, and warm from the kernel
// cache), and a fused x * sigmoid(x) against ATen. Run with
//   bazel run //bench:kernel_codegen_bench [-- N REPEATS]
#include <omp.h>
#include <stdlib.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <vector>

#include "compiler/codegen/llvm_printer.h"
#include "runtime/jit/jit_kernel.h"
#include "runtime/base/kernel_cache.h"

namespace {

using metafuse::runtime::JitKernel;
namespace kir = metafuse::codegen::kir;

kir::Kernel AdamKernel() {
  const kir::DType f = kir::DType::kF32;
  kir::KernelBuilder b("bench_adam");
  int p = b.Input("p", f), g = b.Input("g", f), m = b.Input("m", f), v = b.Input("v", f);
  int lr = b.Scalar("lr", f), b1 = b.Scalar("b1", f), b2 = b.Scalar("b2", f),
      eps = b.Scalar("eps", f);
  int one = b.Const(1.0, f);
  int c1 = b.Sub(one, b1), c2 = b.Sub(one, b2);
  int m2 = b.Add(b.Mul(b1, m), b.Mul(c1, g));
  int gg = b.Mul(g, g);
  int v2 = b.Add(b.Mul(b2, v), b.Mul(c2, gg));
  int step = b.Div(b.Mul(lr, m2), b.Add(b.Sqrt(v2), eps));
  b.Output("m_out", m2);
  b.Output("v_out", v2);
  b.Output("p_out", b.Sub(p, step));
  return *b.Build();
}

// Median seconds of `repeats` timed runs after two warm-up runs.
double Median(int repeats, const std::function<void()>& fn) {
  fn();
  fn();
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    auto start = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : (int64_t{1} << 22);
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 30;
  const double lr = 1e-3, b1 = 0.9, b2 = 0.999, eps = 1e-8;
  torch::manual_seed(0);
  auto p = torch::randn({n}), g = torch::randn({n}), m = torch::randn({n}),
       v = torch::rand({n});

  // Compile: cold (fresh cache directory), then warm (a new cache object on
  // the same directory, as a new process would see it).
  char tmpl[] = "/tmp/mf_codegen_bench_XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return 1;
  const std::string dir = std::string(tmpl) + "/kernels";
  auto cold_cache = metafuse::runtime::KernelCache::Open(dir);
  auto cold = JitKernel::Create(*metafuse::codegen::HostKernelCode(AdamKernel()), cold_cache->get());
  if (!cold.ok()) {
    std::fprintf(stderr, "compile failed: %s\n", cold.status().ToString().c_str());
    return 1;
  }
  auto warm_cache = metafuse::runtime::KernelCache::Open(dir);
  auto warm = JitKernel::Create(*metafuse::codegen::HostKernelCode(AdamKernel()), warm_cache->get());
  std::filesystem::remove_all(tmpl);
  const JitKernel& kernel = **warm;

  // Fused: read p, g, m, v once, write m', v', p' (in place into copies).
  auto pf = p.clone(), mf = m.clone(), vf = v.clone();
  const std::vector<double> scalars = {lr, b1, b2, eps};
  const void* ins[] = {pf.data_ptr(), g.data_ptr(), mf.data_ptr(), vf.data_ptr()};
  void* outs[] = {mf.data_ptr(), vf.data_ptr(), pf.data_ptr()};
  const double fused = Median(repeats, [&] {
    kernel.RunUnchecked(n, ins, outs, scalars.data());
  });

  // Eager out of place: what the unfused program computes, op by op.
  torch::Tensor m2, v2, p2;
  const double eager = Median(repeats, [&] {
    m2 = m * b1 + g * (1 - b1);
    v2 = v * b2 + g * g * (1 - b2);
    p2 = p - lr * m2 / (v2.sqrt() + eps);
  });

  // Eager in place (torch.optim style).
  auto pi = p.clone(), mi = m.clone(), vi = v.clone();
  const double inplace = Median(repeats, [&] {
    mi.mul_(b1).add_(g, 1 - b1);
    vi.mul_(b2).addcmul_(g, g, 1 - b2);
    auto denom = vi.sqrt().add_(eps);
    pi.addcdiv_(mi, denom, -lr);
  });

  // Agreement: one fused step against one eager step from the same state.
  auto pc = p.clone(), mc = m.clone(), vc = v.clone();
  const void* ins1[] = {pc.data_ptr(), g.data_ptr(), mc.data_ptr(), vc.data_ptr()};
  void* outs1[] = {mc.data_ptr(), vc.data_ptr(), pc.data_ptr()};
  kernel.RunUnchecked(n, ins1, outs1, scalars.data());
  m2 = m * b1 + g * (1 - b1);
  v2 = v * b2 + g * g * (1 - b2);
  p2 = p - lr * m2 / (v2.sqrt() + eps);
  const double diff = (pc - p2).abs().max().item<double>();

  const double gb = 7.0 * n * 4 / 1e9;  // 4 reads + 3 writes, float32
  std::printf("Adam-like update, %lld float32 elements, %d OpenMP threads, torch threads %d\n",
              static_cast<long long>(n), omp_get_max_threads(), torch::get_num_threads());
  std::printf("compile: cold %.1f ms, warm (disk cache hit: %s) %.1f ms\n",
              (*cold)->compile_seconds() * 1e3, (*warm)->cache_hit() ? "yes" : "no",
              (*warm)->compile_seconds() * 1e3);
  std::printf("%-34s %9.3f ms  %6.1f GB/s\n", "fused JIT kernel (1 pass)", fused * 1e3,
              gb / fused);
  std::printf("%-34s %9.3f ms  ratio %.2fx\n", "ATen out of place (10 ops)", eager * 1e3,
              eager / fused);
  std::printf("%-34s %9.3f ms  ratio %.2fx\n", "ATen in place (6 ops)", inplace * 1e3,
              inplace / fused);
  std::printf("max |p' fused - p' eager| = %.3g\n", diff);

  // SiLU, x * sigmoid(x): exp as vectorized arithmetic (compiler/codegen/kernel_math.h)
  // against ATen's vectorized sigmoid.
  kir::KernelBuilder sb("bench_silu");
  int x = sb.Input("x", kir::DType::kF32);
  sb.Output("y", sb.Mul(x, sb.Sigmoid(x)));
  auto silu = JitKernel::Create(*metafuse::codegen::HostKernelCode(*sb.Build()));
  if (!silu.ok()) return 1;
  auto y = torch::empty_like(p);
  const void* sin[] = {p.data_ptr()};
  void* sout[] = {y.data_ptr()};
  const double silu_fused = Median(repeats, [&] {
    (*silu)->RunUnchecked(n, sin, sout, nullptr);
  });
  torch::Tensor y_eager;
  const double silu_eager = Median(repeats, [&] { y_eager = p * torch::sigmoid(p); });
  const double silu_aten = Median(repeats, [&] { y_eager = torch::silu(p); });
  std::printf("%-34s %9.3f ms\n", "fused JIT x * sigmoid(x)", silu_fused * 1e3);
  std::printf("%-34s %9.3f ms  ratio %.2fx\n", "ATen x * sigmoid(x) (2 ops)",
              silu_eager * 1e3, silu_eager / silu_fused);
  std::printf("%-34s %9.3f ms  ratio %.2fx\n", "ATen silu (1 fused op)", silu_aten * 1e3,
              silu_aten / silu_fused);
  std::printf("max |y fused - y eager| = %.3g\n", (y - y_eager).abs().max().item<double>());
  return 0;
}
