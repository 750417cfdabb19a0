#include "compiler/codegen/kernel_ir.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compiler/codegen/kernel_math.h"

namespace metafuse::codegen::kir {

const char* DTypeName(DType t) { return t == DType::kF32 ? "f32" : "f64"; }

const char* OpName(Op op) {
  switch (op) {
    case Op::kInput: return "input";
    case Op::kScalar: return "scalar";
    case Op::kConst: return "const";
    case Op::kCast: return "cast";
    case Op::kNeg: return "neg";
    case Op::kExp: return "exp";
    case Op::kLog: return "log";
    case Op::kTanh: return "tanh";
    case Op::kSigmoid: return "sigmoid";
    case Op::kRelu: return "relu";
    case Op::kSqrt: return "sqrt";
    case Op::kRsqrt: return "rsqrt";
    case Op::kAbs: return "abs";
    case Op::kPowConst: return "pow";
    case Op::kAdd: return "add";
    case Op::kSub: return "sub";
    case Op::kMul: return "mul";
    case Op::kDiv: return "div";
    case Op::kMax: return "max";
    case Op::kMin: return "min";
    case Op::kSelect: return "select";
  }
  return "?";
}

const char* CmpName(Cmp c) {
  switch (c) {
    case Cmp::kGt: return "gt";
    case Cmp::kLt: return "lt";
    case Cmp::kGe: return "ge";
    case Cmp::kLe: return "le";
    case Cmp::kEq: return "eq";
    case Cmp::kNe: return "ne";
  }
  return "?";
}

const char* AccessName(Access a) {
  switch (a) {
    case Access::kElement: return "[i]";
    case Access::kBroadcast: return "[0]";
    case Access::kInner: return "[i % inner]";
    case Access::kOuter: return "[i / inner]";
    case Access::kMiddle: return "[i / (mid * inner) * inner + i % inner]";
    case Access::kPeriodic: return "[i / inner % mid]";
  }
  return "?";
}

int OpArity(Op op) {
  switch (op) {
    case Op::kInput:
    case Op::kScalar:
    case Op::kConst:
      return 0;
    case Op::kAdd:
    case Op::kSub:
    case Op::kMul:
    case Op::kDiv:
    case Op::kMax:
    case Op::kMin:
      return 2;
    case Op::kSelect:
      return 4;
    default:
      return 1;
  }
}

PowForm PowFormFor(double e) {
  if (e == 1.0) return PowForm::kOne;
  if (e == 2.0) return PowForm::kSquare;
  if (e == 3.0) return PowForm::kCube;
  if (e == 0.5) return PowForm::kSqrt;
  if (e == -1.0) return PowForm::kRecip;
  if (e == -0.5) return PowForm::kRsqrt;
  return PowForm::kCall;
}

int64_t RequiredInputElements(const InputSpec& in, int64_t n) {
  if (n <= 0) return 0;
  switch (in.access) {
    case Access::kElement: return n;
    case Access::kBroadcast: return 1;
    case Access::kInner: return std::min<int64_t>(in.inner, n);
    case Access::kOuter: return (n - 1) / in.inner + 1;
    case Access::kMiddle: {
      const int64_t last = n - 1, period = in.mid * in.inner;
      return last / period * in.inner + std::min(last % period, in.inner - 1) + 1;
    }
    case Access::kPeriodic: return std::min<int64_t>(in.mid, (n - 1) / in.inner + 1);
  }
  return n;
}

namespace {

std::string NodeRef(const Kernel& k, int id) {
  return absl::StrCat("node %", id, " (", OpName(k.nodes[id].op), ")");
}

bool IsIdentifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  }
  return true;
}

// Hex form of a double's bits: the constant's exact value, on every platform.
std::string ExactDouble(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return absl::StrFormat("0x%016X", bits);
}

// Whether v survives a round trip through float32 bit for bit (NaN payloads
// included: LLVM only accepts float constants it can represent).
bool IsExactFloat(double v) {
  const double back = static_cast<double>(static_cast<float>(v));
  return std::memcmp(&back, &v, sizeof v) == 0;
}

}  // namespace

absl::Status Validate(const Kernel& k) {
  if (!IsIdentifier(k.name)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel name '", k.name, "' must be a C identifier ([A-Za-z_][A-Za-z0-9_]*)"));
  }
  std::unordered_set<std::string> names;
  auto check_name = [&](const std::string& kind, const std::string& name) {
    if (!IsIdentifier(name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "kernel '", k.name, "': ", kind, " name '", name, "' must be a C identifier"));
    }
    if (!names.insert(name).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "kernel '", k.name, "': ", kind, " name '", name,
          "' is used twice (inputs, scalars and outputs need distinct names)"));
    }
    return absl::OkStatus();
  };
  for (const InputSpec& in : k.inputs) {
    if (absl::Status s = check_name("input", in.name); !s.ok()) return s;
    if ((HasInner(in.access) && in.inner <= 0) || (HasMid(in.access) && in.mid <= 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "kernel '", k.name, "': input '", in.name, "' reads ", AccessName(in.access),
          " with inner = ", in.inner, ", mid = ", in.mid, "; expected both > 0"));
    }
  }
  for (const ScalarSpec& s : k.scalars) {
    if (absl::Status st = check_name("scalar", s.name); !st.ok()) return st;
  }
  const int num_nodes = static_cast<int>(k.nodes.size());
  for (int id = 0; id < num_nodes; ++id) {
    const Node& n = k.nodes[id];
    const std::string where = absl::StrCat("kernel '", k.name, "': ", NodeRef(k, id));
    if (static_cast<int>(n.args.size()) != OpArity(n.op)) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, " has ", n.args.size(), " arguments; expected ", OpArity(n.op)));
    }
    for (int a : n.args) {
      if (a < 0 || a >= num_nodes) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, " reads unknown node %", a, "; expected an id in [0, ", num_nodes, ")"));
      }
    }
    auto arg_type = [&](size_t i) { return k.nodes[n.args[i]].dtype; };
    auto mismatch = [&](size_t i, DType expected) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": argument ", i, " is %", n.args[i], " of dtype ",
          DTypeName(arg_type(i)), "; expected ", DTypeName(expected),
          " (insert a cast)"));
    };
    switch (n.op) {
      case Op::kInput:
        if (n.index < 0 || n.index >= static_cast<int>(k.inputs.size())) {
          return absl::InvalidArgumentError(absl::StrCat(
              where, " reads unknown input #", n.index, "; the kernel has ",
              k.inputs.size(), " inputs"));
        }
        if (k.inputs[n.index].dtype != n.dtype) {
          return absl::InvalidArgumentError(absl::StrCat(
              where, " has dtype ", DTypeName(n.dtype), " but input '",
              k.inputs[n.index].name, "' is ", DTypeName(k.inputs[n.index].dtype)));
        }
        break;
      case Op::kScalar:
        if (n.index < 0 || n.index >= static_cast<int>(k.scalars.size())) {
          return absl::InvalidArgumentError(absl::StrCat(
              where, " reads unknown scalar #", n.index, "; the kernel has ",
              k.scalars.size(), " scalars"));
        }
        if (k.scalars[n.index].dtype != n.dtype) {
          return absl::InvalidArgumentError(absl::StrCat(
              where, " has dtype ", DTypeName(n.dtype), " but scalar '",
              k.scalars[n.index].name, "' is ", DTypeName(k.scalars[n.index].dtype)));
        }
        break;
      case Op::kConst:
        if (n.dtype == DType::kF32 && !IsExactFloat(n.value)) {
          return absl::InvalidArgumentError(absl::StrCat(
              where, " holds ", n.value, ", not exactly a float32; expected the value "
              "rounded to float32 (KernelBuilder::Const rounds it)"));
        }
        break;
      case Op::kCast:
        break;  // any dtype to any dtype
      case Op::kSelect:
        if (arg_type(1) != arg_type(0)) return mismatch(1, arg_type(0));
        if (arg_type(2) != n.dtype) return mismatch(2, n.dtype);
        if (arg_type(3) != n.dtype) return mismatch(3, n.dtype);
        break;
      default:
        for (size_t i = 0; i < n.args.size(); ++i) {
          if (arg_type(i) != n.dtype) return mismatch(i, n.dtype);
        }
    }
  }
  if (k.outputs.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("kernel '", k.name, "' has no outputs; expected at least one"));
  }
  for (const OutputSpec& out : k.outputs) {
    if (absl::Status s = check_name("output", out.name); !s.ok()) return s;
    if (out.node < 0 || out.node >= num_nodes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "kernel '", k.name, "': output '", out.name, "' reads unknown node %",
          out.node, "; expected an id in [0, ", num_nodes, ")"));
    }
  }
  // Cycles: iterative depth-first search with three colours.
  std::vector<int> colour(num_nodes, 0);  // 0 new, 1 on stack, 2 done
  for (int root = 0; root < num_nodes; ++root) {
    if (colour[root]) continue;
    std::vector<std::pair<int, size_t>> stack{{root, 0}};
    colour[root] = 1;
    while (!stack.empty()) {
      auto& [id, next] = stack.back();
      if (next < k.nodes[id].args.size()) {
        int a = k.nodes[id].args[next++];
        if (colour[a] == 1) {
          std::string path;
          bool on = false;
          for (auto& [sid, unused] : stack) {
            if (sid == a) on = true;
            if (on) absl::StrAppend(&path, "%", sid, " -> ");
          }
          absl::StrAppend(&path, "%", a);
          return absl::InvalidArgumentError(absl::StrCat(
              "kernel '", k.name, "': ", NodeRef(k, a), " is on a cycle (", path,
              "); expected an acyclic expression graph"));
        }
        if (colour[a] == 0) {
          colour[a] = 1;
          stack.push_back({a, 0});
        }
      } else {
        colour[id] = 2;
        stack.pop_back();
      }
    }
  }
  return absl::OkStatus();
}

std::vector<int> LiveTopologicalOrder(const Kernel& k) {
  std::vector<int> order;
  std::vector<char> seen(k.nodes.size(), 0);
  for (const OutputSpec& out : k.outputs) {
    std::vector<std::pair<int, size_t>> stack;
    if (seen[out.node]) continue;
    seen[out.node] = 1;
    stack.push_back({out.node, 0});
    while (!stack.empty()) {
      auto& [id, next] = stack.back();
      if (next < k.nodes[id].args.size()) {
        int a = k.nodes[id].args[next++];
        if (!seen[a]) {
          seen[a] = 1;
          stack.push_back({a, 0});
        }
      } else {
        order.push_back(id);
        stack.pop_back();
      }
    }
  }
  return order;
}

std::string Print(const Kernel& k) {
  std::string s = absl::StrCat("kernel ", k.name, " {\n");
  for (size_t i = 0; i < k.inputs.size(); ++i) {
    const InputSpec& in = k.inputs[i];
    absl::StrAppend(&s, "  in ", i, " ", in.name, ": ", DTypeName(in.dtype), " ",
                    AccessName(in.access));
    if (HasInner(in.access)) absl::StrAppend(&s, " inner=", in.inner);
    if (HasMid(in.access)) absl::StrAppend(&s, " mid=", in.mid);
    s += "\n";
  }
  for (size_t i = 0; i < k.scalars.size(); ++i) {
    absl::StrAppend(&s, "  scalar ", i, " ", k.scalars[i].name, ": ",
                    DTypeName(k.scalars[i].dtype), "\n");
  }
  for (size_t id = 0; id < k.nodes.size(); ++id) {
    const Node& n = k.nodes[id];
    absl::StrAppend(&s, "  %", id, " = ", OpName(n.op));
    if (n.op == Op::kSelect) absl::StrAppend(&s, ".", CmpName(n.cmp));
    if (n.op == Op::kInput || n.op == Op::kScalar) absl::StrAppend(&s, " #", n.index);
    if (n.op == Op::kConst || n.op == Op::kPowConst) {
      absl::StrAppend(&s, " ", absl::StrFormat("%.17g", n.value), " [",
                      ExactDouble(n.value), "]");
    }
    for (size_t i = 0; i < n.args.size(); ++i) {
      absl::StrAppend(&s, i ? ", %" : " %", n.args[i]);
    }
    absl::StrAppend(&s, " : ", DTypeName(n.dtype), "\n");
  }
  for (size_t i = 0; i < k.outputs.size(); ++i) {
    absl::StrAppend(&s, "  out ", i, " ", k.outputs[i].name, " = %", k.outputs[i].node,
                    "\n");
  }
  s += "}\n";
  return s;
}

namespace {
struct Fnv {
  uint64_t h = 1469598103934665603ull;
  void Byte(uint8_t b) {
    h ^= b;
    h *= 1099511628211ull;
  }
  void U64(uint64_t v) {
    for (int i = 0; i < 8; ++i) Byte(static_cast<uint8_t>(v >> (8 * i)));
  }
  void F64(double v) {
    uint64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    U64(bits);
  }
};
}  // namespace

uint64_t StructuralHash(const Kernel& k) {
  Fnv f;
  f.U64(k.inputs.size());
  for (const InputSpec& in : k.inputs) {
    f.Byte(static_cast<uint8_t>(in.dtype));
    f.Byte(static_cast<uint8_t>(in.access));
    f.U64(static_cast<uint64_t>(in.inner));
    if (HasMid(in.access)) f.U64(static_cast<uint64_t>(in.mid));  // older hashes unchanged
  }
  f.U64(k.scalars.size());
  for (const ScalarSpec& s : k.scalars) f.Byte(static_cast<uint8_t>(s.dtype));
  f.U64(k.nodes.size());
  for (const Node& n : k.nodes) {
    f.Byte(static_cast<uint8_t>(n.op));
    f.Byte(static_cast<uint8_t>(n.dtype));
    f.Byte(static_cast<uint8_t>(n.cmp));
    f.U64(static_cast<uint64_t>(static_cast<int64_t>(n.index)));
    f.F64(n.value);
    f.U64(n.args.size());
    for (int a : n.args) f.U64(static_cast<uint64_t>(static_cast<int64_t>(a)));
  }
  f.U64(k.outputs.size());
  for (const OutputSpec& o : k.outputs) f.U64(static_cast<uint64_t>(static_cast<int64_t>(o.node)));
  return f.h;
}

// ---------------------------------------------------------------- builder

KernelBuilder::KernelBuilder(std::string name) { kernel_.name = std::move(name); }

bool KernelBuilder::Check(int id, const char* what) {
  if (!error_.ok()) return false;
  if (id < 0 || id >= static_cast<int>(kernel_.nodes.size())) {
    error_ = absl::InvalidArgumentError(absl::StrCat(
        "kernel '", kernel_.name, "': ", what, " reads unknown node %", id,
        "; expected an id returned by this builder (", kernel_.nodes.size(),
        " nodes so far)"));
    return false;
  }
  return true;
}

DType KernelBuilder::dtype_of(int node) const {
  return node >= 0 && node < static_cast<int>(kernel_.nodes.size())
             ? kernel_.nodes[node].dtype
             : DType::kF32;
}

int KernelBuilder::Add(Node node) {
  kernel_.nodes.push_back(std::move(node));
  return static_cast<int>(kernel_.nodes.size()) - 1;
}

int KernelBuilder::Input(const std::string& name, DType dtype, Access access,
                         int64_t inner, int64_t mid) {
  kernel_.inputs.push_back({name, dtype, access, inner, mid});
  Node n;
  n.op = Op::kInput;
  n.dtype = dtype;
  n.index = static_cast<int>(kernel_.inputs.size()) - 1;
  return Add(n);
}

int KernelBuilder::Scalar(const std::string& name, DType dtype) {
  kernel_.scalars.push_back({name, dtype});
  Node n;
  n.op = Op::kScalar;
  n.dtype = dtype;
  n.index = static_cast<int>(kernel_.scalars.size()) - 1;
  return Add(n);
}

int KernelBuilder::Const(double value, DType dtype) {
  Node n;
  n.op = Op::kConst;
  n.dtype = dtype;
  n.value = dtype == DType::kF32 ? static_cast<double>(static_cast<float>(value)) : value;
  return Add(n);
}

int KernelBuilder::Cast(int a, DType to) {
  if (!Check(a, "cast")) return -1;
  Node n;
  n.op = Op::kCast;
  n.dtype = to;
  n.args = {a};
  return Add(n);
}

int KernelBuilder::Unary(Op op, int a) {
  if (!Check(a, OpName(op))) return -1;
  Node n;
  n.op = op;
  n.dtype = kernel_.nodes[a].dtype;
  n.args = {a};
  return Add(n);
}

int KernelBuilder::Pow(int a, double exponent) {
  int id = Unary(Op::kPowConst, a);
  if (id >= 0) kernel_.nodes[id].value = exponent;
  return id;
}

int KernelBuilder::Binary(Op op, int a, int b) {
  if (!Check(a, OpName(op)) || !Check(b, OpName(op))) return -1;
  if (kernel_.nodes[a].dtype != kernel_.nodes[b].dtype) {
    error_ = absl::InvalidArgumentError(absl::StrCat(
        "kernel '", kernel_.name, "': ", OpName(op), "(%", a, ", %", b,
        ") mixes dtypes ", DTypeName(kernel_.nodes[a].dtype), " and ",
        DTypeName(kernel_.nodes[b].dtype), "; expected equal dtypes (insert a cast)"));
    return -1;
  }
  Node n;
  n.op = op;
  n.dtype = kernel_.nodes[a].dtype;
  n.args = {a, b};
  return Add(n);
}

int KernelBuilder::Select(Cmp cmp, int a, int b, int x, int y) {
  for (int id : {a, b, x, y}) {
    if (!Check(id, "select")) return -1;
  }
  Node n;
  n.op = Op::kSelect;
  n.cmp = cmp;
  n.dtype = kernel_.nodes[x].dtype;
  n.args = {a, b, x, y};
  return Add(n);  // dtype agreement is checked by Validate
}

void KernelBuilder::Output(const std::string& name, int node) {
  if (!Check(node, "output")) return;
  kernel_.outputs.push_back({name, node});
}

absl::StatusOr<Kernel> KernelBuilder::Build() const {
  if (!error_.ok()) return error_;
  if (absl::Status s = Validate(kernel_); !s.ok()) return s;
  return kernel_;
}

}  // namespace metafuse::codegen::kir
