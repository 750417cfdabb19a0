#include "kernels/adam_direction.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/Parallel.h>

#include <cmath>

namespace metafuse {
namespace {

template <typename T>
struct Scalars {
  T b1, one_minus_b1, b2, one_minus_b2, bc1, bc2, eps, eps_root;
};

template <typename T>
Scalars<T> Cast(const AdamDirectionScalars& s) {
  return {static_cast<T>(s.b1),  static_cast<T>(1.0 - s.b1),
          static_cast<T>(s.b2),  static_cast<T>(1.0 - s.b2),
          static_cast<T>(s.bc1), static_cast<T>(s.bc2),
          static_cast<T>(s.eps), static_cast<T>(s.eps_root)};
}

// Written for exactly these roundings: std::fma where ATen fuses, a
// division where ATen divides (never a reciprocal multiply). No product
// here feeds a plain addition, so -ffp-contract (off in setup.py, GCC's
// default fast under Bazel) cannot fuse anything else.
template <typename T>
inline void Element(const Scalars<T>& c, T& mu, T& nu, T g, T& out) {
  const T m = std::fma(g, c.one_minus_b1, mu * c.b1);
  const T v = std::fma(c.one_minus_b2 * g, g, nu * c.b2);
  mu = m;
  nu = v;
  out = (m / c.bc1) / (std::sqrt(v / c.bc2 + c.eps_root) + c.eps);
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
void LoopFloat(const Scalars<float>& c, float* mu, float* nu, const float* g,
               float* out, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) Element(c, mu[i], nu[i], g[i], out[i]);
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
void LoopDouble(const Scalars<double>& c, double* mu, double* nu,
                const double* g, double* out, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) Element(c, mu[i], nu[i], g[i], out[i]);
}

// A plain dense CPU tensor: no functorch wrapper (vmap's batched tensors,
// grad's wrappers have no memory of their own to loop over), no Python
// subclass, no sparse or other backend.
bool PlainCpu(const at::Tensor& t) {
  static const c10::DispatchKeySet wrapped{
      c10::DispatchKey::FuncTorchBatched, c10::DispatchKey::FuncTorchGradWrapper,
      c10::DispatchKey::Python, c10::DispatchKey::Functionalize,
      c10::DispatchKey::Conjugate, c10::DispatchKey::Negative,
      c10::DispatchKey::ZeroTensor};
  return t.device().is_cpu() && t.layout() == at::kStrided && t.has_storage() &&
         !t.key_set().has_any(wrapped);
}

bool Apart(const at::Tensor& a, const at::Tensor& b) {
  return at::get_overlap_status(a, b) == at::MemOverlapStatus::No;
}

}  // namespace

bool AdamDirectionApplies(const at::Tensor& mu, const at::Tensor& nu,
                          const at::Tensor& g) {
  const at::ScalarType dtype = g.scalar_type();
  if (dtype != at::kFloat && dtype != at::kDouble) return false;
  for (const at::Tensor* t : {&mu, &nu, &g}) {
    if (!t->defined() || !PlainCpu(*t) || t->scalar_type() != dtype ||
        !t->is_contiguous() || t->numel() != g.numel()) {
      return false;
    }
  }
  return Apart(mu, nu) && Apart(mu, g) && Apart(nu, g);
}

at::Tensor AdamDirectionInPlace(at::Tensor& mu, at::Tensor& nu,
                                const at::Tensor& g,
                                const AdamDirectionScalars& s) {
  TORCH_CHECK(AdamDirectionApplies(mu, nu, g),
              "AdamDirectionInPlace: mu, nu and g must be contiguous CPU "
              "tensors of one floating dtype and size, apart in memory");
  at::Tensor out = at::empty_like(g, at::MemoryFormat::Contiguous);
  const int64_t n = g.numel();
  // Split over threads at ATen's elementwise grain (each element's rounding
  // does not depend on where a chunk starts).
  if (g.scalar_type() == at::kFloat) {
    const Scalars<float> c = Cast<float>(s);
    float *m = mu.data_ptr<float>(), *v = nu.data_ptr<float>(),
          *o = out.data_ptr<float>();
    const float* x = g.data_ptr<float>();
    at::parallel_for(0, n, at::internal::GRAIN_SIZE, [&](int64_t begin, int64_t end) {
      LoopFloat(c, m + begin, v + begin, x + begin, o + begin, end - begin);
    });
  } else {
    const Scalars<double> c = Cast<double>(s);
    double *m = mu.data_ptr<double>(), *v = nu.data_ptr<double>(),
           *o = out.data_ptr<double>();
    const double* x = g.data_ptr<double>();
    at::parallel_for(0, n, at::internal::GRAIN_SIZE, [&](int64_t begin, int64_t end) {
      LoopDouble(c, m + begin, v + begin, x + begin, o + begin, end - begin);
    });
  }
  return out;
}

}  // namespace metafuse
