#include "compiler/codegen/c_renderer.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace metafuse::codegen {
namespace {

using kir::Access;
using kir::DType;
using kir::Kernel;
using kir::Node;
using kir::Op;

const char* CmpOp(kir::Cmp c) {
  switch (c) {
    case kir::Cmp::kGt: return ">";
    case kir::Cmp::kLt: return "<";
    case kir::Cmp::kGe: return ">=";
    case kir::Cmp::kLe: return "<=";
    case kir::Cmp::kEq: return "==";
    case kir::Cmp::kNe: return "!=";
  }
  return ">";
}

// How an input is read at element i.
std::string InputRead(const kir::InputSpec& in, int index) {
  switch (in.access) {
    case Access::kElement: return absl::StrCat("in", index, "[i]");
    case Access::kBroadcast: return absl::StrCat("b", index);
    case Access::kInner: return absl::StrCat("in", index, "[i % ", in.inner, "]");
    case Access::kOuter: return absl::StrCat("in", index, "[i / ", in.inner, "]");
    case Access::kMiddle:
      return absl::StrCat("in", index, "[i / ", in.mid * in.inner, " * ", in.inner, " + i % ",
                          in.inner, "]");
    case Access::kPeriodic:
      return absl::StrCat("in", index, "[i / ", in.inner, " % ", in.mid, "]");
  }
  return "";
}

}  // namespace

const char* CRenderer::TypeName(DType t) { return t == DType::kF32 ? "float" : "double"; }

std::string CRenderer::Literal(double v, DType t) const {
  if (std::isnan(v) || std::isinf(v)) return SpecialLiteral(v, t);
  return absl::StrCat("(", absl::StrFormat("%a", v), t == DType::kF32 ? "f" : "", ")");
}

std::string CRenderer::Expression(const Kernel& k, int id) const {
  const Node& n = k.nodes[id];
  const DType t = n.dtype;
  const std::string T = TypeName(t);
  auto a = [&](int i) { return absl::StrCat("v", n.args[i]); };
  auto call = [&](MathFn fn, const std::string& x) {
    return absl::StrCat(MathName(fn, t), "(", x, ")");
  };
  const std::string one = absl::StrCat(T, "(1)"), zero = absl::StrCat(T, "(0)");
  switch (n.op) {
    case Op::kInput: return InputRead(k.inputs[n.index], n.index);
    case Op::kScalar: return absl::StrCat("s", n.index);
    case Op::kConst: return Literal(n.value, t);
    case Op::kCast: return absl::StrCat("static_cast<", T, ">(", a(0), ")");
    case Op::kNeg: return absl::StrCat("-", a(0));
    case Op::kExp: return absl::StrCat(ExpName(t), "(", a(0), ")");
    case Op::kLog: return call(MathFn::kLog, a(0));
    case Op::kTanh: return call(MathFn::kTanh, a(0));
    case Op::kSigmoid:
      return absl::StrCat(one, " / (", one, " + ", ExpName(t), "(-", a(0), "))");
    case Op::kRelu: return absl::StrCat(a(0), " < ", zero, " ? ", zero, " : ", a(0));
    case Op::kSqrt: return call(MathFn::kSqrt, a(0));
    case Op::kRsqrt: return absl::StrCat(one, " / ", call(MathFn::kSqrt, a(0)));
    case Op::kAbs: return call(MathFn::kFabs, a(0));
    case Op::kPowConst: {
      const std::string x = a(0);
      switch (kir::PowFormFor(n.value)) {
        case kir::PowForm::kOne: return x;
        case kir::PowForm::kSquare: return absl::StrCat(x, " * ", x);
        case kir::PowForm::kCube: return absl::StrCat(x, " * ", x, " * ", x);
        case kir::PowForm::kSqrt: return call(MathFn::kSqrt, x);
        case kir::PowForm::kRecip: return absl::StrCat(one, " / ", x);
        case kir::PowForm::kRsqrt: return absl::StrCat(one, " / ", call(MathFn::kSqrt, x));
        case kir::PowForm::kCall: {
          const double e = t == DType::kF32
                               ? static_cast<double>(static_cast<float>(n.value))
                               : n.value;
          return absl::StrCat(MathName(MathFn::kPow, t), "(", x, ", ", Literal(e, t), ")");
        }
      }
      return x;
    }
    case Op::kAdd: return absl::StrCat(a(0), " + ", a(1));
    case Op::kSub: return absl::StrCat(a(0), " - ", a(1));
    case Op::kMul: return absl::StrCat(a(0), " * ", a(1));
    case Op::kDiv: return absl::StrCat(a(0), " / ", a(1));
    case Op::kMax:
    case Op::kMin:
      // NaN in either argument propagates (torch.maximum / torch.minimum).
      return absl::StrCat(a(0), " != ", a(0), " ? ", a(0), " : (", a(0),
                          n.op == Op::kMax ? " > " : " < ", a(1), " ? ", a(0), " : ", a(1),
                          ")");
    case Op::kSelect:
      return absl::StrCat("(", a(0), " ", CmpOp(n.cmp), " ", a(1), ") ? ", a(2), " : ", a(3));
  }
  return "";
}

std::string CRenderer::BroadcastLoads(const Kernel& k, const std::string& indent) const {
  std::string out;
  for (size_t j = 0; j < k.inputs.size(); ++j) {
    if (k.inputs[j].access == Access::kBroadcast) {
      absl::StrAppend(&out, indent, "const ", TypeName(k.inputs[j].dtype), " b", j, " = in", j,
                      "[0];\n");
    }
  }
  return out;
}

std::string CRenderer::LoopBody(const Kernel& k, const std::string& indent) const {
  std::string out;
  for (int id : kir::LiveTopologicalOrder(k)) {
    absl::StrAppend(&out, indent, "const ", TypeName(k.nodes[id].dtype), " v", id, " = ",
                    Expression(k, id), ";\n");
  }
  for (size_t j = 0; j < k.outputs.size(); ++j) {
    absl::StrAppend(&out, indent, "out", j, "[i] = v", k.outputs[j].node, ";\n");
  }
  return out;
}

}  // namespace metafuse::codegen
