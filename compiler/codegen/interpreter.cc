// The reference interpreter of the kernel IR: the semantics every printer
// must reproduce. Built as its own target with -ffp-contract=off, so no FMA
// contraction changes its roundings (compiler/codegen/BUILD).
#include "compiler/codegen/kernel_ir.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "compiler/codegen/kernel_math.h"

namespace metafuse::codegen::kir {


namespace {

template <typename T>
bool Compare(Cmp c, T a, T b) {
  switch (c) {
    case Cmp::kGt: return a > b;
    case Cmp::kLt: return a < b;
    case Cmp::kGe: return a >= b;
    case Cmp::kLe: return a <= b;
    case Cmp::kEq: return a == b;
    case Cmp::kNe: return a != b;
  }
  return false;
}

template <typename T>
T PowConst(T x, double e) {
  switch (PowFormFor(e)) {
    case PowForm::kOne: return x;
    case PowForm::kSquare: return x * x;
    case PowForm::kCube: return x * x * x;
    case PowForm::kSqrt: return std::sqrt(x);
    case PowForm::kRecip: return T(1) / x;
    case PowForm::kRsqrt: return T(1) / std::sqrt(x);
    case PowForm::kCall: return std::pow(x, static_cast<T>(e));
  }
  return x;
}

// One op in dtype T; `v` holds every value as double (float values exactly).
template <typename T>
T Apply(const Node& n, const std::vector<double>& v, DType cmp_dtype) {
  auto arg = [&](int i) { return static_cast<T>(v[n.args[i]]); };
  switch (n.op) {
    case Op::kCast: return static_cast<T>(v[n.args[0]]);
    case Op::kConst: return static_cast<T>(n.value);
    case Op::kNeg: return -arg(0);
    case Op::kExp: return mf_kernel_math::Exp(arg(0));
    case Op::kLog: return std::log(arg(0));
    case Op::kTanh: return mf_kernel_math::Tanh(arg(0));
    case Op::kSigmoid: return T(1) / (T(1) + mf_kernel_math::Exp(-arg(0)));
    case Op::kRelu: return arg(0) < T(0) ? T(0) : arg(0);
    case Op::kSqrt: return std::sqrt(arg(0));
    case Op::kRsqrt: return T(1) / std::sqrt(arg(0));
    case Op::kAbs: return std::fabs(arg(0));
    case Op::kPowConst: return PowConst(arg(0), n.value);
    case Op::kAdd: return arg(0) + arg(1);
    case Op::kSub: return arg(0) - arg(1);
    case Op::kMul: return arg(0) * arg(1);
    case Op::kDiv: return arg(0) / arg(1);
    case Op::kMax: {
      T a = arg(0), b = arg(1);
      return a != a ? a : (a > b ? a : b);
    }
    case Op::kMin: {
      T a = arg(0), b = arg(1);
      return a != a ? a : (a < b ? a : b);
    }
    case Op::kSelect: {
      bool c = cmp_dtype == DType::kF32
                   ? Compare(n.cmp, static_cast<float>(v[n.args[0]]),
                             static_cast<float>(v[n.args[1]]))
                   : Compare(n.cmp, v[n.args[0]], v[n.args[1]]);
      return c ? arg(2) : arg(3);
    }
    default: return T(0);  // inputs and scalars are loaded by the caller
  }
}

}  // namespace

absl::Status CheckLaunch(const Kernel& k, int64_t n, size_t num_inputs, size_t num_outputs,
                         size_t num_scalars) {
  if (n < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("kernel '", k.name, "': n = ", n, "; expected n >= 0"));
  }
  if (num_inputs != k.inputs.size() || num_outputs != k.outputs.size() ||
      num_scalars != k.scalars.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel '", k.name, "' takes ", k.inputs.size(), " inputs, ", k.outputs.size(),
        " outputs, ", k.scalars.size(), " scalars; got ", num_inputs, ", ", num_outputs,
        ", ", num_scalars));
  }
  return absl::OkStatus();
}

absl::Status Interpret(const Kernel& k, int64_t n, const std::vector<const void*>& inputs,
                       const std::vector<void*>& outputs,
                       const std::vector<double>& scalars) {
  if (absl::Status s = Validate(k); !s.ok()) return s;
  if (absl::Status s = CheckLaunch(k, n, inputs.size(), outputs.size(), scalars.size());
      !s.ok()) {
    return s;
  }
  const std::vector<int> order = LiveTopologicalOrder(k);
  std::vector<double> v(k.nodes.size(), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    for (int id : order) {
      const Node& node = k.nodes[id];
      if (node.op == Op::kInput) {
        const InputSpec& in = k.inputs[node.index];
        const int64_t j = kir::InputIndex(in, i);
        v[id] = in.dtype == DType::kF32 ? static_cast<const float*>(inputs[node.index])[j]
                                        : static_cast<const double*>(inputs[node.index])[j];
      } else if (node.op == Op::kScalar) {
        double s = scalars[node.index];
        v[id] = node.dtype == DType::kF32 ? static_cast<float>(s) : s;
      } else {
        const DType cmp_dtype =
            node.op == Op::kSelect ? k.nodes[node.args[0]].dtype : node.dtype;
        v[id] = node.dtype == DType::kF32 ? Apply<float>(node, v, cmp_dtype)
                                          : Apply<double>(node, v, cmp_dtype);
      }
    }
    for (size_t o = 0; o < k.outputs.size(); ++o) {
      const int id = k.outputs[o].node;
      if (k.nodes[id].dtype == DType::kF32) {
        static_cast<float*>(outputs[o])[i] = static_cast<float>(v[id]);
      } else {
        static_cast<double*>(outputs[o])[i] = v[id];
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace metafuse::codegen::kir
