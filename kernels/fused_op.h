// The one generic fused-optimizer operator (included by kernels/<opt>.cc):
// from an optimizer's math struct (kernels/fused_step.h lists what it
// supplies) it makes the three torch operators and registers them,
//
//   <name>(Tensor grad, <states>, Tensor? param=None, *, <options>)
//       -> (Tensor update, <states>)                  single tensor
//   <name>_multi(Tensor[] grads, <state lists>, Tensor[] params, *, <options>)
//       -> (Tensor[] updates, <state lists>)          multi-tensor, functional
//   <name>_multi_(Tensor[] grads, Tensor(a!)[] <state lists>,
//       Tensor(z!)[] params, *, <options>) -> ()     multi-tensor, in place
//
// so that an optimizer file holds only its math and its schema:
//
//   TORCH_LIBRARY_FRAGMENT(metafuse, m) { RegisterFusedOp<kernels::Adam>(m); }
//
// The C++ types of the options (int -> int64_t, float -> double, bool -> bool)
// are read from Opt::kOptions at compile time, and the options arrive as one
// double each in Opt::Hyper, in schema order.
#pragma once

#include <torch/library.h>

#include <array>
#include <cstddef>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/fused_step.h"
#include "kernels/optimizers.h"

namespace metafuse::kernels {
namespace fused_op_internal {

template <class... T>
struct TypeList {};

// T, once per element of a pack of indices.
template <class T, std::size_t>
struct Repeat {
  using type = T;
};
template <class T, std::size_t I>
using RepeatT = typename Repeat<T, I>::type;

// "int count, float lr=0.001, bool maximize=False": the number of options and
// the first letter of the i-th one's type.
constexpr int CountOptions(const char* s) {
  int n = 1;
  for (; *s != '\0'; ++s) n += *s == ',' ? 1 : 0;
  return n;
}

constexpr char OptionKind(const char* s, int i) {
  for (; i > 0; ++s) i -= *s == ',' ? 1 : 0;
  while (*s == ' ') ++s;
  return *s;
}

template <char K>
struct OptionType {
  static_assert(K == 'i' || K == 'f' || K == 'b',
                "an option's type must be int, float or bool");
};
template <>
struct OptionType<'i'> {
  using type = int64_t;
};
template <>
struct OptionType<'f'> {
  using type = double;
};
template <>
struct OptionType<'b'> {
  using type = bool;
};

template <class Opt,
          class Is = std::make_index_sequence<CountOptions(Opt::kOptions)>>
struct OptionTypes;
template <class Opt, std::size_t... I>
struct OptionTypes<Opt, std::index_sequence<I...>> {
  using type =
      TypeList<typename OptionType<OptionKind(Opt::kOptions, I)>::type...>;
};

constexpr bool IsOptional(const StateArg& s) { return s.absent != nullptr; }

// A state is optional exactly when some variant leaves it out.
template <class Opt>
constexpr bool StatesConsistent() {
  for (int slot = 0; slot < NumStateArgs<Opt>(); ++slot) {
    bool always = true;
    for (int v = 0; v < Opt::kNumVariants; ++v) {
      always = always && Opt::UsesState(v, slot);
    }
    if (always == IsOptional(Opt::kStates[slot])) return false;
  }
  return true;
}

// A state's parameter in the single-tensor form.
template <class Opt, std::size_t J>
using SingleState =
    std::conditional_t<IsOptional(Opt::kStates[J]),
                       const c10::optional<at::Tensor>&, const at::Tensor&>;

}  // namespace fused_op_internal

template <class Opt,
          class Slots = std::make_index_sequence<NumStateArgs<Opt>()>,
          class Options = typename fused_op_internal::OptionTypes<Opt>::type>
struct FusedOp;

template <class Opt, std::size_t... J, class... O>
struct FusedOp<Opt, std::index_sequence<J...>,
               fused_op_internal::TypeList<O...>> {
  using Hyper = typename Opt::Hyper;
  template <std::size_t I>
  using Lists = fused_op_internal::RepeatT<at::TensorList, I>;
  template <std::size_t I>
  using Vecs = fused_op_internal::RepeatT<TensorVec, I>;
  template <std::size_t I>
  using Tensors = fused_op_internal::RepeatT<at::Tensor, I>;

  static_assert(sizeof(Hyper) == sizeof...(O) * sizeof(double),
                "Opt::Hyper holds one double per option of Opt::kOptions");
  static_assert(fused_op_internal::StatesConsistent<Opt>(),
                "Opt::kStates: a state is optional (`absent` set) exactly "
                "when some variant does not use it");

  static Hyper MakeHyper(O... options) {
    return Hyper{static_cast<double>(options)...};
  }

  // The state lists the variant uses, in argument order; an unused one must
  // be empty.
  static std::vector<at::TensorList> UsedStates(
      const Hyper& h, const std::array<at::TensorList, sizeof...(J)>& lists) {
    const int variant = Opt::Variant(h);
    std::vector<at::TensorList> used;
    for (int slot = 0; slot < static_cast<int>(lists.size()); ++slot) {
      if (Opt::UsesState(variant, slot)) {
        used.push_back(lists[slot]);
        continue;
      }
      TORCH_CHECK(lists[slot].empty(), "metafuse::", Opt::kName, ": ",
                  Opt::kStates[slot].absent, "; pass an empty `",
                  Opt::kStates[slot].list, "` (None), got ", lists[slot].size(),
                  " tensor(s)");
    }
    return used;
  }

  // The new state of argument `slot` (an empty list where it is unused).
  static TensorVec StateOut(const Hyper& h, const StepOutputs& out, int slot) {
    const int variant = Opt::Variant(h);
    for (int j = 0; j < NumStates<Opt>(variant); ++j) {
      if (StateSlot<Opt>(variant, j) == slot) return out.states[j];
    }
    return {};
  }

  static std::tuple<TensorVec, Vecs<J>...> Multi(at::TensorList grads,
                                                 Lists<J>... states,
                                                 at::TensorList params,
                                                 O... options) {
    const Hyper h = MakeHyper(options...);
    StepOutputs out =
        FusedStep<Opt>(h, grads, params, UsedStates(h, {states...}));
    return {out.updates, StateOut(h, out, J)...};
  }

  // In place: params += update, the states overwritten.
  static void MultiInPlace(at::TensorList grads, Lists<J>... states,
                           at::TensorList params, O... options) {
    const Hyper h = MakeHyper(options...);
    FusedStepInPlace<Opt>(h, params, grads, UsedStates(h, {states...}));
  }

  static std::tuple<at::Tensor, Tensors<J>...> Single(
      const at::Tensor& grad, fused_op_internal::SingleState<Opt, J>... states,
      const c10::optional<at::Tensor>& param, O... options) {
    const auto lists =
        Multi({grad}, ListOf(states)..., ListOf(param), options...);
    return {std::get<0>(lists)[0], FirstOrUndefined(std::get<1 + J>(lists))...};
  }

  // The three schemas, from the name, the state arguments and the options.
  static std::array<std::string, 3> Schemas() {
    const std::string name = Opt::kName, options = Opt::kOptions;
    std::string single = name + "(Tensor grad, ";
    std::string multi = name + "_multi(Tensor[] grads, ";
    std::string in_place = name + "_multi_(Tensor[] grads, ";
    std::string single_out = "Tensor update", multi_out = "Tensor[] updates";
    char alias = 'a';
    for (const StateArg& s : Opt::kStates) {
      const std::string one = s.single, list = s.list;
      single += fused_op_internal::IsOptional(s) ? "Tensor? " + one + "=None, "
                                                 : "Tensor " + one + ", ";
      multi += "Tensor[] " + list + ", ";
      in_place += std::string("Tensor(") + alias++ + "!)[] " + list + ", ";
      single_out += ", Tensor " + one;
      multi_out += ", Tensor[] " + list;
    }
    const std::string tail = ", *, " + options + ") -> ";
    return {single + "Tensor? param=None" + tail + "(" + single_out + ")",
            multi + "Tensor[] params" + tail + "(" + multi_out + ")",
            in_place + "Tensor(" + alias + "!)[] params" + tail + "()"};
  }
};

// Catch-all kernels: the autograd node is made inside (FusedStep), so the
// ops work under every dispatch key the CPU build has.
template <class Opt>
void RegisterFusedOp(torch::Library& m) {
  using Op = FusedOp<Opt>;
  const std::array<std::string, 3> schemas = Op::Schemas();
  m.def(schemas[0].c_str(), TORCH_FN(Op::Single));
  m.def(schemas[1].c_str(), TORCH_FN(Op::Multi));
  m.def(schemas[2].c_str(), TORCH_FN(Op::MultiInPlace));
}

// The same three functions as the kernels of one dispatch key. A build
// against CUDA torch registers them for CUDA and AutogradCUDA: the functions
// build their own autograd node (FusedStep), and with a CUDA kernel
// registered the catch-all no longer serves AutogradCUDA.
template <class Opt>
void RegisterFusedOpImpls(torch::Library& m) {
  using Op = FusedOp<Opt>;
  const std::string name = Opt::kName;
  m.impl(name.c_str(), TORCH_FN(Op::Single));
  m.impl((name + "_multi").c_str(), TORCH_FN(Op::Multi));
  m.impl((name + "_multi_").c_str(), TORCH_FN(Op::MultiInPlace));
}

}  // namespace metafuse::kernels

// One line per optimizer file (at namespace metafuse scope): the three ops
// of `Opt`, and where torch has CUDA their CUDA registration (the element
// loop's CUDA form is kernels/cuda/register_cuda.cc).
#ifdef METAFUSE_WITH_CUDA_TORCH
#define METAFUSE_REGISTER_FUSED_OP(Opt)                                   \
  TORCH_LIBRARY_FRAGMENT(metafuse, m) { kernels::RegisterFusedOp<Opt>(m); } \
  TORCH_LIBRARY_IMPL(metafuse, CUDA, m) {                                  \
    kernels::RegisterFusedOpImpls<Opt>(m);                                 \
  }                                                                        \
  TORCH_LIBRARY_IMPL(metafuse, AutogradCUDA, m) {                          \
    kernels::RegisterFusedOpImpls<Opt>(m);                                 \
  }
#else
#define METAFUSE_REGISTER_FUSED_OP(Opt) \
  TORCH_LIBRARY_FRAGMENT(metafuse, m) { kernels::RegisterFusedOp<Opt>(m); }
#endif
