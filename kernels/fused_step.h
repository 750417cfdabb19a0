// The machinery every fused optimizer op shares (included through
// kernels/fused_op.h): argument checks, the multi-tensor CPU forward (one
// parallel region over the total element count, vectorized element loop), and
// one generic torch::autograd::Function whose backward is each optimizer's
// closed form.
//
// An optimizer `Opt` (derived from FusedOptimizer, which gives the defaults)
// supplies:
//   kName, kStates (its state arguments, StateArg), kOptions (schema text)
//   struct Hyper                  one double per option, in kOptions' order
//   kNumAux, kNumVariants, Variant(h), UsesState(variant, slot), UsesParam(h)
//   Check(h)
//   template <A> Coeffs<A> MakeCoeffs(h)
//   template <A, V> Element(c, g, p, s0, s1, s2, &u, &o0, &o1, &o2, &x0, &x1)
//     (the used states in and out in argument order, then the aux values)
//   Backward(h, variant, SavedStep) -> {grad_g, grad_p, grad_states...}
//   optionally kFusedBackward and BackwardElement (kernels/fused_backward.h)
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>

#include <array>
#include <cstring>
#include <iterator>
#include <type_traits>
#include <vector>

#include "kernels/multi_tensor.h"
#include "kernels/optim_math.h"

// The element loops are compiled twice, for AVX2+FMA (x86-64-v3) and for the
// baseline, and the loader picks one at run time (GCC function
// multiversioning): a 256-bit hot loop where the CPU has it, a binary that
// still runs where it does not.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MF_VECTORIZED_LOOP \
  __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define MF_VECTORIZED_LOOP
#endif

namespace metafuse::kernels {

// Calls fn(std::integral_constant<int, V>{}) for the runtime `variant`
// (0 <= variant < N): the optimizer variant becomes a template argument of
// the hot loops, so they hold no per-element branch on it.
template <int N, int V = 0, class Fn>
void DispatchVariant(int variant, Fn&& fn) {
  if constexpr (V < N) {
    if (variant == V) {
      fn(std::integral_constant<int, V>{});
    } else {
      DispatchVariant<N, V + 1>(variant, std::forward<Fn>(fn));
    }
  }
}

// One state argument of an op: `single` names it in the single-tensor form,
// `list` in the list forms. A state that some variant does not use is
// optional: `absent` says when it is unused (the error when one is passed
// anyway), it is `Tensor? single=None` in the single-tensor form and an empty
// list in the list forms.
struct StateArg {
  const char* single;
  const char* list;
  const char* absent = nullptr;
};

// The defaults of the optimizer interface (see the top of this file).
struct FusedOptimizer {
  static constexpr int kNumAux = 0;
  static constexpr int kNumVariants = 1;
  template <class Hyper>
  static int Variant(const Hyper&) { return 0; }
  static constexpr bool UsesState(int /*variant*/, int /*slot*/) { return true; }
  template <class Hyper>
  static bool UsesParam(const Hyper& h) { return h.weight_decay != 0.0; }
};

template <class Opt>
constexpr int NumStateArgs() {
  return static_cast<int>(std::size(Opt::kStates));
}

// How many states `variant` uses; they are packed in argument order.
template <class Opt>
constexpr int NumStates(int variant) {
  int n = 0;
  for (int slot = 0; slot < NumStateArgs<Opt>(); ++slot) {
    n += Opt::UsesState(variant, slot) ? 1 : 0;
  }
  return n;
}

// The argument slot of the j-th state `variant` uses (-1: none).
template <class Opt>
constexpr int StateSlot(int variant, int j) {
  for (int slot = 0; slot < NumStateArgs<Opt>(); ++slot) {
    if (Opt::UsesState(variant, slot) && j-- == 0) return slot;
  }
  return -1;
}

template <class Opt>
const char* StateName(int variant, int j) {
  return Opt::kStates[StateSlot<Opt>(variant, j)].list;
}

}  // namespace metafuse::kernels

#include "kernels/fused_backward.h"

namespace metafuse::kernels {

constexpr int kMaxStates = 3;
constexpr int kMaxAux = 2;

// Element pointers of one tensor (or one segment of it).
template <typename T>
struct ChunkPtrs {
  const T* g = nullptr;
  const T* p = nullptr;
  const T* s[kMaxStates] = {};
  T* u = nullptr;
  T* so[kMaxStates] = {};
  T* aux[kMaxAux] = {};

  ChunkPtrs Shift(int64_t off) const {
    ChunkPtrs r = *this;
    r.g += off;
    if (r.p) r.p += off;
    r.u += off;
    for (int j = 0; j < kMaxStates; ++j) {
      if (r.s[j]) r.s[j] += off;
      if (r.so[j]) r.so[j] += off;
    }
    for (int x = 0; x < kMaxAux; ++x) {
      if (r.aux[x]) r.aux[x] += off;
    }
    return r;
  }
};

// What an element loop reads and writes besides grads and states.
enum LoopMode : int {
  kPlain = 0,     // no param read, no aux written
  kParam = 1,     // param read (weight decay)
  kAux = 2,       // aux written (autograd saves it)
  kParamAux = 3,  // both
  kInPlace = 4,   // param read and overwritten with param + update, states
                  // overwritten; no aux (the in-place step is not
                  // differentiable)
};

// The hot loop: no branch depends on the element (kMode and kVariant are
// compile-time), every pointer is a local __restrict__ scalar and every
// per-element value a scalar (no arrays: GCC would keep them in memory), so
// `omp simd` turns it into packed arithmetic. In place, outputs are written
// through the input pointers themselves (same index, after the read).
template <class Opt, typename T, int kMode, int kVariant>
MF_VECTORIZED_LOOP void ElementLoop(
    const typename Opt::template Coeffs<at::opmath_type<T>> c,
    const ChunkPtrs<T> ptr, int64_t n) {
  using A = at::opmath_type<T>;
  constexpr bool kInPlaceMode = kMode == kInPlace;
  constexpr bool kReadParam = (kMode & kParam) || kInPlaceMode;
  constexpr int S = NumStates<Opt>(kVariant);
  constexpr int X = (!kInPlaceMode && (kMode & kAux)) ? Opt::kNumAux : 0;
  const T* __restrict__ g = ptr.g;
  const T* __restrict__ p = ptr.p;
  const T* __restrict__ s0 = ptr.s[0];
  const T* __restrict__ s1 = ptr.s[1];
  const T* __restrict__ s2 = ptr.s[2];
  if constexpr (kInPlaceMode) {
    // Each value is read and then written through one pointer, at one index.
    T* pw = const_cast<T*>(p);
    T* w0 = const_cast<T*>(s0);
    T* w1 = const_cast<T*>(s1);
    T* w2 = const_cast<T*>(s2);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const A pi = static_cast<A>(pw[i]);
      A upd, n0 = 0, n1 = 0, n2 = 0, a0 = 0, a1 = 0;
      Opt::template Element<A, kVariant>(
          c, static_cast<A>(g[i]), pi, S > 0 ? static_cast<A>(w0[i]) : A(0),
          S > 1 ? static_cast<A>(w1[i]) : A(0),
          S > 2 ? static_cast<A>(w2[i]) : A(0), &upd, &n0, &n1, &n2, &a0, &a1);
      pw[i] = static_cast<T>(pi + upd);
      if (S > 0) w0[i] = static_cast<T>(n0);
      if (S > 1) w1[i] = static_cast<T>(n1);
      if (S > 2) w2[i] = static_cast<T>(n2);
    }
  } else {
    T* __restrict__ u = ptr.u;
    T* __restrict__ o0 = ptr.so[0];
    T* __restrict__ o1 = ptr.so[1];
    T* __restrict__ o2 = ptr.so[2];
    T* __restrict__ x0 = ptr.aux[0];
    T* __restrict__ x1 = ptr.aux[1];
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      A upd, n0 = 0, n1 = 0, n2 = 0, a0 = 0, a1 = 0;
      Opt::template Element<A, kVariant>(
          c, static_cast<A>(g[i]), kReadParam ? static_cast<A>(p[i]) : A(0),
          S > 0 ? static_cast<A>(s0[i]) : A(0),
          S > 1 ? static_cast<A>(s1[i]) : A(0),
          S > 2 ? static_cast<A>(s2[i]) : A(0), &upd, &n0, &n1, &n2, &a0, &a1);
      u[i] = static_cast<T>(upd);
      if (S > 0) o0[i] = static_cast<T>(n0);
      if (S > 1) o1[i] = static_cast<T>(n1);
      if (S > 2) o2[i] = static_cast<T>(n2);
      if (X > 0) x0[i] = static_cast<T>(a0);
      if (X > 1) x1[i] = static_cast<T>(a1);
    }
  }
}

template <class Opt, typename T, int kMode>
void RunVariant(int variant,
                const typename Opt::template Coeffs<at::opmath_type<T>>& c,
                const ChunkPtrs<T>& ptr, int64_t n) {
  DispatchVariant<Opt::kNumVariants>(variant, [&](auto v) {
    ElementLoop<Opt, T, kMode, decltype(v)::value>(c, ptr, n);
  });
}

template <class Opt, typename T>
void RunMode(int mode, int variant,
             const typename Opt::template Coeffs<at::opmath_type<T>>& c,
             const ChunkPtrs<T>& ptr, int64_t n) {
  switch (mode) {
    case kPlain: return RunVariant<Opt, T, kPlain>(variant, c, ptr, n);
    case kParam: return RunVariant<Opt, T, kParam>(variant, c, ptr, n);
    case kAux: return RunVariant<Opt, T, kAux>(variant, c, ptr, n);
    case kParamAux: return RunVariant<Opt, T, kParamAux>(variant, c, ptr, n);
    default: return RunVariant<Opt, T, kInPlace>(variant, c, ptr, n);
  }
}

// The CUDA form of the element loop, set by kernels/cuda/register_cuda.cc in
// a build against CUDA torch (METAFUSE_WITH_CUDA_TORCH); null elsewhere. It
// receives the host coefficients Opt::MakeCoeffs<T> built (T = float or
// double, `dtype`), the variant, each used state's fixed slot (StateSlot)
// and the lists RunFusedLoop gets, and enqueues the kernels on torch's
// current stream of the tensors' device.
struct CudaLoopArgs {
  const char* op = "";
  c10::ScalarType dtype = c10::kFloat;
  const void* coeffs = nullptr;
  int variant = 0;
  std::vector<int> state_slots;  // per used state j
  const std::vector<at::Tensor>* g = nullptr;
  const std::vector<at::Tensor>* p = nullptr;  // empty: no params
  const std::vector<std::vector<at::Tensor>>* s = nullptr;
  const std::vector<at::Tensor>* u = nullptr;
  const std::vector<std::vector<at::Tensor>>* so = nullptr;
  const std::vector<std::vector<at::Tensor>>* aux = nullptr;  // empty: none
  // In place: u holds the params, which get param + update, and so the
  // states themselves (kernels' `accumulate`).
  bool in_place = false;
};
using CudaLoop = void (*)(const CudaLoopArgs&);
inline CudaLoop& RegisteredCudaLoop() {
  static CudaLoop loop = nullptr;
  return loop;
}

inline std::string NoCudaKernelsMessage() {
  return "this metafuse build has no CUDA kernels for its torch operators (build it "
         "against a CUDA torch, which defines METAFUSE_WITH_CUDA_TORCH: pip install "
         "--no-build-isolation .), or move the tensors to the CPU";
}

// RunFusedLoop's CUDA branch. In place, one pass: the kernels add each update
// to its param and write the states over themselves (the functional step
// followed by add_ and copy_ moved 13 values per Adam element instead of 7,
// and ran at 51-57% of the copy bandwidth on an H100).
template <class Opt>
void RunCudaLoop(const typename Opt::Hyper& h, bool in_place, const std::vector<at::Tensor>& g,
                 const std::vector<at::Tensor>& p,
                 const std::vector<std::vector<at::Tensor>>& s,
                 const std::vector<at::Tensor>& u,
                 const std::vector<std::vector<at::Tensor>>& so,
                 const std::vector<std::vector<at::Tensor>>& aux) {
  TORCH_CHECK(RegisteredCudaLoop() != nullptr, "metafuse::", Opt::kName, " on ",
              g[0].device(), ": ", NoCudaKernelsMessage());
  const c10::ScalarType dtype = g[0].scalar_type();
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kDouble, "metafuse::", Opt::kName,
              ": the CUDA kernels take float32 and float64, got ", dtype,
              "; cast the tensors or use the CPU");
  CudaLoopArgs a;
  a.op = Opt::kName;
  a.dtype = dtype;
  a.variant = Opt::Variant(h);
  for (size_t j = 0; j < s.size(); ++j) {
    a.state_slots.push_back(StateSlot<Opt>(a.variant, static_cast<int>(j)));
  }
  a.g = &g, a.p = &p, a.s = &s, a.u = &u, a.so = &so, a.aux = &aux;
  const std::vector<at::Tensor> no_params;
  if (in_place) {
    a.in_place = true;
    a.u = &p;
    a.so = &s;
    a.p = Opt::UsesParam(h) ? &p : &no_params;
  }
  if (dtype == at::kFloat) {
    const auto coeffs = Opt::template MakeCoeffs<float>(h);
    a.coeffs = &coeffs;
    RegisteredCudaLoop()(a);
  } else {
    const auto coeffs = Opt::template MakeCoeffs<double>(h);
    a.coeffs = &coeffs;
    RegisteredCudaLoop()(a);
  }
}

// Runs the element loop over lists of contiguous tensors (states[j][k];
// undefined outputs where the mode has none): one at::parallel_for over all
// elements of all tensors.
template <class Opt>
void RunFusedLoop(const typename Opt::Hyper& h, int mode,
                  const std::vector<at::Tensor>& g,
                  const std::vector<at::Tensor>& p,
                  const std::vector<std::vector<at::Tensor>>& s,
                  const std::vector<at::Tensor>& u,
                  const std::vector<std::vector<at::Tensor>>& so,
                  const std::vector<std::vector<at::Tensor>>& aux) {
  const size_t K = g.size();
  if (K == 0) return;
  if (g[0].is_cuda()) return RunCudaLoop<Opt>(h, mode == kInPlace, g, p, s, u, so, aux);
  const int variant = Opt::Variant(h);
  std::vector<int64_t> sizes(K);
  for (size_t k = 0; k < K; ++k) sizes[k] = g[k].numel();
  const std::vector<int64_t> offsets = SegmentOffsets(sizes);
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, g[0].scalar_type(), Opt::kName, [&] {
        using A = at::opmath_type<scalar_t>;
        const auto coeffs = Opt::template MakeCoeffs<A>(h);
        auto ptr_of = [](const at::Tensor& t) {
          return t.defined() ? t.data_ptr<scalar_t>() : nullptr;
        };
        std::vector<ChunkPtrs<scalar_t>> ptrs(K);
        for (size_t k = 0; k < K; ++k) {
          auto& q = ptrs[k];
          q.g = ptr_of(g[k]);
          if (!p.empty()) q.p = ptr_of(p[k]);
          if (!u.empty()) q.u = ptr_of(u[k]);
          for (size_t j = 0; j < s.size(); ++j) q.s[j] = ptr_of(s[j][k]);
          for (size_t j = 0; j < so.size(); ++j) q.so[j] = ptr_of(so[j][k]);
          for (size_t x = 0; x < aux.size(); ++x) q.aux[x] = ptr_of(aux[x][k]);
        }
        at::parallel_for(
            0, offsets.back(), at::internal::GRAIN_SIZE,
            [&](int64_t begin, int64_t end) {
              ForEachSegment(offsets, begin, end,
                             [&](int64_t k, int64_t lo, int64_t hi) {
                RunMode<Opt, scalar_t>(mode, variant, coeffs,
                                       ptrs[k].Shift(lo), hi - lo);
              });
            });
      });
}

// One list per role: grads[k], params[k] (empty list: no params),
// states[j][k]. Outputs: updates[k], states[j][k], aux[x][k] (aux only when
// `with_aux`: the autograd path saves them for the backward).
struct StepOutputs {
  std::vector<at::Tensor> updates;
  std::vector<std::vector<at::Tensor>> states;
  std::vector<std::vector<at::Tensor>> aux;
};

inline void CheckLike(const char* op, const char* role, size_t k,
                      const at::Tensor& t, const at::Tensor& grad) {
  TORCH_CHECK(t.defined(), "metafuse::", op, ": `", role, "` tensor ", k,
              " is undefined (None)");
  TORCH_CHECK(t.sizes() == grad.sizes(), "metafuse::", op, ": `", role,
              "` tensor ", k, " must have the shape of its gradient ",
              grad.sizes(), ", got ", t.sizes());
  TORCH_CHECK(t.scalar_type() == grad.scalar_type(), "metafuse::", op, ": `",
              role, "` tensor ", k, " must have the dtype of its gradient (",
              grad.scalar_type(), "), got ", t.scalar_type());
  TORCH_CHECK(t.device() == grad.device(), "metafuse::", op, ": `", role,
              "` tensor ", k, " must be on the device of its gradient (",
              grad.device(), "), got ", t.device());
}

template <class Opt>
void CheckStepArgs(const typename Opt::Hyper& h, at::TensorList grads,
                   at::TensorList params,
                   const std::vector<at::TensorList>& states) {
  Opt::Check(h);
  const size_t K = grads.size();
  const int variant = Opt::Variant(h);
  const int S = NumStates<Opt>(variant);
  TORCH_CHECK(static_cast<int>(states.size()) == S, "metafuse::", Opt::kName,
              ": expected ", S, " state lists for these options, got ",
              states.size());
  for (int j = 0; j < S; ++j) {
    TORCH_CHECK(states[j].size() == K, "metafuse::", Opt::kName, ": `",
                StateName<Opt>(variant, j), "` must hold one tensor per "
                "gradient (", K, "), got ", states[j].size());
  }
  TORCH_CHECK(params.empty() || params.size() == K, "metafuse::", Opt::kName,
              ": `params` must be empty or hold one tensor per gradient (", K,
              "), got ", params.size());
  TORCH_CHECK(!Opt::UsesParam(h) || params.size() == K, "metafuse::",
              Opt::kName,
              ": weight_decay != 0 needs the parameters: pass `params`");
  for (size_t k = 0; k < K; ++k) {
    const at::Tensor& g = grads[k];
    TORCH_CHECK(g.defined(), "metafuse::", Opt::kName, ": `grads` tensor ", k,
                " is undefined (None)");
    TORCH_CHECK(at::isFloatingType(g.scalar_type()), "metafuse::", Opt::kName,
                ": expected floating-point tensors, `grads` tensor ", k,
                " is ", g.scalar_type());
    TORCH_CHECK(g.scalar_type() == grads[0].scalar_type(), "metafuse::",
                Opt::kName, ": all tensors of one call must share a dtype; "
                "`grads` tensor ", k, " is ", g.scalar_type(), ", tensor 0 is ",
                grads[0].scalar_type(), " (call once per dtype)");
    TORCH_CHECK(g.device().is_cpu() ||
                    (g.device().is_cuda() && RegisteredCudaLoop() != nullptr),
                "metafuse::", Opt::kName, ": `grads` tensor ", k, " is on ",
                g.device(), "; ",
                g.device().is_cuda() ? NoCudaKernelsMessage()
                                     : std::string("the operator runs on CPU and CUDA tensors"));
    if (!params.empty()) CheckLike(Opt::kName, "params", k, params[k], g);
    for (int j = 0; j < S; ++j) {
      CheckLike(Opt::kName, StateName<Opt>(variant, j), k, states[j][k], g);
    }
  }
}

// The fused multi-tensor forward: every output written in one pass, one
// at::parallel_for over all elements of all tensors.
template <class Opt>
StepOutputs FusedStepForward(const typename Opt::Hyper& h,
                             at::TensorList grads, at::TensorList params,
                             const std::vector<at::TensorList>& states,
                             bool with_aux) {
  CheckStepArgs<Opt>(h, grads, params, states);
  const int variant = Opt::Variant(h);
  const int S = NumStates<Opt>(variant);
  const bool use_param = Opt::UsesParam(h);
  const size_t K = grads.size();
  StepOutputs out;
  out.states.resize(S);
  if (with_aux) out.aux.resize(Opt::kNumAux);
  std::vector<at::Tensor> g(K), p(use_param ? K : 0);
  std::vector<std::vector<at::Tensor>> s(S, std::vector<at::Tensor>(K));
  for (size_t k = 0; k < K; ++k) {
    g[k] = grads[k].contiguous();
    if (use_param) p[k] = params[k].contiguous();
    for (int j = 0; j < S; ++j) s[j][k] = states[j][k].contiguous();
    out.updates.push_back(at::empty_like(g[k], at::MemoryFormat::Contiguous));
    for (int j = 0; j < S; ++j) out.states[j].push_back(at::empty_like(out.updates[k]));
    for (auto& a : out.aux) a.push_back(at::empty_like(out.updates[k]));
  }
  const int mode = (use_param ? kParam : kPlain) | (with_aux ? kAux : kPlain);
  RunFusedLoop<Opt>(h, mode, g, p, s, out.updates, out.states, out.aux);
  return out;
}

// The in-place step (torch.optim's job): param += update and the states
// overwritten, one pass reading grad, param and states. Not differentiable:
// use the functional op to differentiate through a step.
template <class Opt>
void FusedStepInPlace(const typename Opt::Hyper& h, at::TensorList params,
                      at::TensorList grads,
                      const std::vector<at::TensorList>& states) {
  TORCH_CHECK(params.size() == grads.size(), "metafuse::", Opt::kName,
              "_multi_: `params` must hold one tensor per gradient (",
              grads.size(), "), got ", params.size());
  CheckStepArgs<Opt>(h, grads, params, states);
  const bool grad_mode = at::GradMode::is_enabled();
  auto check_target = [&](const at::Tensor& t, const char* role, size_t k) {
    TORCH_CHECK(t.is_contiguous(), "metafuse::", Opt::kName, "_multi_: `",
                role, "` tensor ", k, " must be contiguous to be updated in "
                "place");
    TORCH_CHECK(!(grad_mode && t.requires_grad()), "metafuse::", Opt::kName,
                "_multi_: `", role, "` tensor ", k, " requires grad; the "
                "in-place step is not differentiable (call it under "
                "torch.no_grad(), or use the functional ", Opt::kName,
                "_multi to differentiate through the step)");
  };
  const size_t K = grads.size();
  const int S = static_cast<int>(states.size());
  std::vector<at::Tensor> g(K), p(params.begin(), params.end());
  std::vector<std::vector<at::Tensor>> s(S);
  for (size_t k = 0; k < K; ++k) {
    check_target(params[k], "params", k);
    g[k] = grads[k].contiguous();
  }
  for (int j = 0; j < S; ++j) {
    const char* name = StateName<Opt>(Opt::Variant(h), j);
    for (size_t k = 0; k < K; ++k) check_target(states[j][k], name, k);
    s[j].assign(states[j].begin(), states[j].end());
  }
  RunFusedLoop<Opt>(h, kInPlace, g, p, s, {}, {}, {});
}

// What the closed-form backward of one tensor sees. Undefined grad_* means
// zero (that output was not used); `p` is undefined without weight decay.
struct SavedStep {
  at::Tensor g, p;
  std::vector<at::Tensor> s_in, s_out, aux;
  at::Tensor grad_u;
  std::vector<at::Tensor> grad_s, grad_aux;
};

// What the closed-form element backwards of optim_math.h see of a saved step
// when they run on tensors (A = at::Tensor, C = double): an absent value (the
// param without weight decay, an unused state, an undefined gradient) is a
// zero scalar, which the formulas multiply by a zero coefficient or add.
inline at::Tensor ZeroOf(const SavedStep& s) {
  return at::zeros({}, s.g.options());
}
inline at::Tensor OrZero(const SavedStep& s, const at::Tensor& t) {
  return t.defined() ? t : ZeroOf(s);
}
// grad_p back to the caller: only where the param was saved.
inline at::Tensor ParamGrad(const SavedStep& s, const at::Tensor& grad_p) {
  return s.p.defined() ? grad_p : at::Tensor();
}

// RootInverse (optim_math.h) on tensors, differentiable to every order:
// mask / (r + (1 - mask)) with mask = (r != 0) is exactly 1 / r where r > 0
// (r + 0) and 0 / 1 where r == 0, so the gradient is finite at r == 0 too
// (no 0 * inf).
template <>
struct RootInverse<at::Tensor> {
  static at::Tensor Of(const at::Tensor& r) {
    const at::Tensor mask = (r != 0).to(r.scalar_type());  // NaN stays NaN
    return mask / (r + at::rsub(mask, 1));
  }
};

// a + b where an undefined tensor is zero.
inline at::Tensor AddOpt(const at::Tensor& a, const at::Tensor& b) {
  if (!a.defined()) return b;
  if (!b.defined()) return a;
  return a + b;
}

// The effective gradient ge = sign * g + l2 * p, rebuilt in ATen ops so that
// the backward stays differentiable in g and p.
inline at::Tensor EffectiveGrad(const SavedStep& s, double sign, double l2) {
  at::Tensor ge = sign == 1.0 ? s.g : s.g * sign;
  if (l2 != 0.0) ge = ge + s.p * l2;
  return ge;
}

// {grad_g, grad_p} from the gradient w.r.t. ge = sign * g + l2 * p and the
// decoupled weight-decay term update -= decoupled * p.
inline std::vector<at::Tensor> GradsFromEffective(const SavedStep& s,
                                                  const at::Tensor& grad_ge,
                                                  double sign, double l2,
                                                  double decoupled) {
  at::Tensor grad_g = sign == 1.0 ? grad_ge : grad_ge * sign;
  at::Tensor grad_p;
  if (s.p.defined()) {
    grad_p = grad_ge * l2;
    if (decoupled != 0.0) grad_p = grad_p - s.grad_u * decoupled;
  }
  return {grad_g, grad_p};
}

template <class Hyper>
std::vector<double> HyperToVector(const Hyper& h) {
  static_assert(sizeof(Hyper) % sizeof(double) == 0, "Hyper: doubles only");
  std::vector<double> v(sizeof(Hyper) / sizeof(double));
  std::memcpy(v.data(), &h, sizeof(Hyper));
  return v;
}

template <class Hyper>
Hyper HyperFromVector(const std::vector<double>& v) {
  Hyper h;
  std::memcpy(&h, v.data(), sizeof(Hyper));
  return h;
}

// Forward = the fused kernel (with aux); backward = Opt::Backward in ATen
// ops on saved inputs, outputs and aux. The aux outputs are outputs of this
// node, so when the backward is differentiated again the gradient reaching
// them comes back here: every order is exact.
template <class Opt>
class FusedStepFunction
    : public torch::autograd::Function<FusedStepFunction<Opt>> {
 public:
  static torch::autograd::variable_list forward(
      torch::autograd::AutogradContext* ctx, at::TensorList grads,
      at::TensorList params, at::TensorList states_flat,
      std::vector<double> hyper) {
    const auto h = HyperFromVector<typename Opt::Hyper>(hyper);
    const size_t K = grads.size();
    const int S = NumStates<Opt>(Opt::Variant(h));
    std::vector<at::TensorList> states;
    for (int j = 0; j < S; ++j) states.push_back(states_flat.slice(j * K, K));
    StepOutputs out = FusedStepForward<Opt>(h, grads, params, states, true);
    torch::autograd::variable_list flat(out.updates);
    for (auto& l : out.states) flat.insert(flat.end(), l.begin(), l.end());
    for (auto& l : out.aux) flat.insert(flat.end(), l.begin(), l.end());
    torch::autograd::variable_list to_save(grads.begin(), grads.end());
    to_save.insert(to_save.end(), params.begin(), params.end());
    to_save.insert(to_save.end(), states_flat.begin(), states_flat.end());
    to_save.insert(to_save.end(), flat.begin() + K, flat.end());
    ctx->save_for_backward(to_save);
    ctx->saved_data["hyper"] = hyper;
    ctx->saved_data["num_params"] = static_cast<int64_t>(params.size());
    ctx->set_materialize_grads(false);
    return flat;
  }

  static torch::autograd::variable_list backward(
      torch::autograd::AutogradContext* ctx,
      torch::autograd::variable_list grad_outputs) {
    const auto h = HyperFromVector<typename Opt::Hyper>(
        ctx->saved_data["hyper"].toDoubleVector());
    const int variant = Opt::Variant(h);
    const int S = NumStates<Opt>(variant);
    const int X = Opt::kNumAux;
    const size_t P = ctx->saved_data["num_params"].toInt();
    const torch::autograd::variable_list saved = ctx->get_saved_variables();
    const size_t K = grad_outputs.size() / (1 + S + X);
    if constexpr (HasFusedBackward<Opt>::value) {
      // First order (no graph of the backward wanted) and nothing reaching
      // the aux outputs: one fused pass instead of a dozen ATen ops.
      bool aux_unused = true;
      for (size_t i = (1 + S) * K; i < grad_outputs.size(); ++i) {
        aux_unused = aux_unused && !grad_outputs[i].defined();
      }
      // The fused backward loop is the CPU's; CUDA takes the ATen closed form.
      if (!at::GradMode::is_enabled() && aux_unused && saved[0].is_cpu()) {
        torch::autograd::variable_list result =
            FusedFirstOrderBackward<Opt>(h, K, P, saved, grad_outputs);
        result.emplace_back();  // hyper
        return result;
      }
    }
    torch::autograd::variable_list grad_g(K), grad_p(P), grad_s(S * K);
    for (size_t k = 0; k < K; ++k) {
      SavedStep st;
      st.g = saved[k];
      if (P) st.p = saved[K + k];
      size_t base = K + P;
      for (int j = 0; j < S; ++j) st.s_in.push_back(saved[base + j * K + k]);
      base += S * K;
      for (int j = 0; j < S; ++j) st.s_out.push_back(saved[base + j * K + k]);
      base += S * K;
      for (int x = 0; x < X; ++x) st.aux.push_back(saved[base + x * K + k]);
      st.grad_u = grad_outputs[k];
      for (int j = 0; j < S; ++j) st.grad_s.push_back(grad_outputs[(1 + j) * K + k]);
      for (int x = 0; x < X; ++x) {
        st.grad_aux.push_back(grad_outputs[(1 + S + x) * K + k]);
      }
      bool any = st.grad_u.defined();
      for (auto& t : st.grad_s) any = any || t.defined();
      for (auto& t : st.grad_aux) any = any || t.defined();
      if (!any) continue;  // nothing flows into this tensor's step
      if (!st.grad_u.defined()) st.grad_u = at::zeros_like(st.g);
      for (auto& t : st.grad_s) {
        if (!t.defined()) t = at::zeros_like(st.g);
      }
      std::vector<at::Tensor> r = Opt::Backward(h, variant, st);
      grad_g[k] = r[0];
      if (P) grad_p[k] = r[1];
      for (int j = 0; j < S; ++j) grad_s[j * K + k] = r[2 + j];
    }
    torch::autograd::variable_list result(grad_g);
    result.insert(result.end(), grad_p.begin(), grad_p.end());
    result.insert(result.end(), grad_s.begin(), grad_s.end());
    result.emplace_back();  // hyper
    return result;
  }
};

// The entry point every op uses: fused forward, and the autograd node only
// when a gradient is wanted (no aux buffers otherwise).
template <class Opt>
StepOutputs FusedStep(const typename Opt::Hyper& h, at::TensorList grads,
                      at::TensorList params,
                      const std::vector<at::TensorList>& states) {
  bool needs_grad = false;
  if (at::GradMode::is_enabled()) {
    for (const auto& t : grads) needs_grad |= t.defined() && t.requires_grad();
    for (const auto& t : params) needs_grad |= t.defined() && t.requires_grad();
    for (const auto& l : states) {
      for (const auto& t : l) needs_grad |= t.defined() && t.requires_grad();
    }
  }
  if (!needs_grad) return FusedStepForward<Opt>(h, grads, params, states, false);
  CheckStepArgs<Opt>(h, grads, params, states);
  std::vector<at::Tensor> states_flat;
  for (const auto& l : states) states_flat.insert(states_flat.end(), l.begin(), l.end());
  // Without weight decay the params take no part; leave them out of the graph.
  const at::TensorList used_params =
      Opt::UsesParam(h) ? params : at::TensorList();
  torch::autograd::variable_list flat = FusedStepFunction<Opt>::apply(
      grads, used_params, at::TensorList(states_flat), HyperToVector(h));
  const size_t K = grads.size();
  const int S = static_cast<int>(states.size());
  StepOutputs out;
  out.updates.assign(flat.begin(), flat.begin() + K);
  for (int j = 0; j < S; ++j) {
    out.states.emplace_back(flat.begin() + (1 + j) * K,
                            flat.begin() + (2 + j) * K);
  }
  return out;
}

// The single-tensor ops are the multi-tensor ones on lists of one.
inline std::vector<at::Tensor> ListOf(const at::Tensor& t) { return {t}; }
inline std::vector<at::Tensor> ListOf(const c10::optional<at::Tensor>& t) {
  if (t.has_value() && t->defined()) return {*t};
  return {};
}

inline at::Tensor FirstOrUndefined(const std::vector<at::Tensor>& l) {
  return l.empty() ? at::Tensor() : l[0];
}

inline double SignOf(bool maximize) { return maximize ? -1.0 : 1.0; }

inline void CheckCount(const char* op, int64_t count) {
  TORCH_CHECK(count >= 1, "metafuse::", op,
              ": `count` is the step number after this step and must be >= 1, "
              "got ", count);
}

}  // namespace metafuse::kernels
