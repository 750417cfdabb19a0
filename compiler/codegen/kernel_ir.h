// A small loop-level kernel IR: one flat element loop `for i in [begin, end)`
// over a scalar expression DAG. This is what a fused elementwise group
// becomes before it is printed as LLVM IR (compiler/codegen/llvm_printer.h) or C++
// source (compiler/codegen/cpp_printer.h).
//
// A kernel has
//   - buffer inputs, float32 or float64, each read with an access pattern:
//       kElement   in[i]
//       kBroadcast in[0] (a scalar held in a buffer, read once per call)
//       kInner     in[i % inner]  (e.g. a row vector broadcast over rows)
//       kOuter     in[i / inner]  (e.g. a column vector broadcast over columns)
//       kMiddle    in[i / (mid * inner) * inner + i % inner]  (broadcast over a
//                  middle run of dims: a per-task bias [T, 1, C] over [T, R, C])
//       kPeriodic  in[i / inner % mid]  (only a middle run of dims: a
//                  per-channel vector [1, C, 1, 1] over NCHW)
//   - scalar parameters, passed at run time as doubles (e.g. a learning rate)
//     and rounded to the parameter's dtype once per call,
//   - nodes: scalar ops over earlier values (see Op),
//   - outputs, each a buffer of the producing node's dtype written at out[i].
//
// Semantics are those of a scalar C++ loop, op by op, with no fast-math: every
// op rounds to its own dtype, nothing is contracted into an FMA. exp (and the
// exp inside sigmoid) is mf_kernel_math::Exp and tanh mf_kernel_math::Tanh
// (compiler/codegen/kernel_math.h); log and pow with a general exponent are
// libm's. The reference interpreter
// (Interpret) defines them; both printers must agree with it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace metafuse::codegen::kir {

enum class DType : uint8_t { kF32, kF64 };
enum class Access : uint8_t { kElement, kBroadcast, kInner, kOuter, kMiddle, kPeriodic };
enum class Cmp : uint8_t { kGt, kLt, kGe, kLe, kEq, kNe };

enum class Op : uint8_t {
  kInput,     // index = input number
  kScalar,    // index = scalar parameter number
  kConst,     // value (rounded to dtype)
  kCast,      // 1 arg; converts to the node's dtype
  kNeg, kExp, kLog, kTanh, kSigmoid, kRelu, kSqrt, kRsqrt, kAbs,  // 1 arg
  kPowConst,  // 1 arg; value = the constant exponent
  kAdd, kSub, kMul, kDiv, kMax, kMin,  // 2 args
  kSelect,    // 4 args (a, b, x, y): (a cmp b) ? x : y; a, b may differ in dtype from x, y
};

const char* DTypeName(DType t);
const char* OpName(Op op);
const char* CmpName(Cmp c);
const char* AccessName(Access a);
int OpArity(Op op);

struct InputSpec {
  std::string name;
  DType dtype = DType::kF32;
  Access access = Access::kElement;
  int64_t inner = 1;  // for kInner / kOuter / kMiddle / kPeriodic, > 0
  int64_t mid = 1;    // for kMiddle / kPeriodic, > 0
};

// Whether `access` reads with `inner` (and, for the last two, `mid`).
inline bool HasInner(Access a) { return a != Access::kElement && a != Access::kBroadcast; }
inline bool HasMid(Access a) { return a == Access::kMiddle || a == Access::kPeriodic; }

// The element an input reads at loop index i.
inline int64_t InputIndex(const InputSpec& in, int64_t i) {
  switch (in.access) {
    case Access::kElement: return i;
    case Access::kBroadcast: return 0;
    case Access::kInner: return i % in.inner;
    case Access::kOuter: return i / in.inner;
    case Access::kMiddle: return i / (in.mid * in.inner) * in.inner + i % in.inner;
    case Access::kPeriodic: return i / in.inner % in.mid;
  }
  return i;
}

struct ScalarSpec {
  std::string name;
  DType dtype = DType::kF32;
};

struct Node {
  Op op = Op::kConst;
  DType dtype = DType::kF32;
  std::vector<int> args;  // node ids
  int index = -1;         // kInput / kScalar
  double value = 0.0;     // kConst value, kPowConst exponent
  Cmp cmp = Cmp::kGt;     // kSelect
};

struct OutputSpec {
  std::string name;
  int node = -1;
};

struct Kernel {
  std::string name;
  std::vector<InputSpec> inputs;
  std::vector<ScalarSpec> scalars;
  std::vector<Node> nodes;
  std::vector<OutputSpec> outputs;
};

// Checks the kernel: a C identifier name, unique input/scalar/output names,
// node ids in range, arities, dtypes (arguments of an op share its dtype;
// casts are explicit), input/scalar references, acyclicity, at least one
// output. Errors name the node (as %id and its op) and what was expected.
absl::Status Validate(const Kernel& kernel);

// Node ids in an order where every node follows its arguments, restricted to
// the nodes that some output reads. Requires a valid kernel.
std::vector<int> LiveTopologicalOrder(const Kernel& kernel);

// Stable, human-readable text: same kernel, same text, on every platform.
std::string Print(const Kernel& kernel);

// A 64-bit FNV-1a hash of the kernel's structure: dtypes, access patterns,
// ops, constants (bit patterns), edges and outputs, not names. Stable across
// processes and platforms (it never uses std::hash).
uint64_t StructuralHash(const Kernel& kernel);

// How a constant exponent is evaluated; shared by the interpreter and both
// printers so that they agree bit for bit.
enum class PowForm { kOne, kSquare, kCube, kSqrt, kRecip, kRsqrt, kCall };
PowForm PowFormFor(double exponent);

// Builds a kernel node by node. Each method returns the new node id. Misuse
// (a bad id, a dtype mismatch) is recorded and reported by Build(), so a
// chain of calls needs no checks in between.
class KernelBuilder {
 public:
  explicit KernelBuilder(std::string name);

  int Input(const std::string& name, DType dtype, Access access = Access::kElement,
            int64_t inner = 1, int64_t mid = 1);
  int Scalar(const std::string& name, DType dtype);
  int Const(double value, DType dtype);
  int Cast(int a, DType to);
  int Neg(int a) { return Unary(Op::kNeg, a); }
  int Exp(int a) { return Unary(Op::kExp, a); }
  int Log(int a) { return Unary(Op::kLog, a); }
  int Tanh(int a) { return Unary(Op::kTanh, a); }
  int Sigmoid(int a) { return Unary(Op::kSigmoid, a); }
  int Relu(int a) { return Unary(Op::kRelu, a); }
  int Sqrt(int a) { return Unary(Op::kSqrt, a); }
  int Rsqrt(int a) { return Unary(Op::kRsqrt, a); }
  int Abs(int a) { return Unary(Op::kAbs, a); }
  int Pow(int a, double exponent);
  int Add(int a, int b) { return Binary(Op::kAdd, a, b); }
  int Sub(int a, int b) { return Binary(Op::kSub, a, b); }
  int Mul(int a, int b) { return Binary(Op::kMul, a, b); }
  int Div(int a, int b) { return Binary(Op::kDiv, a, b); }
  int Max(int a, int b) { return Binary(Op::kMax, a, b); }
  int Min(int a, int b) { return Binary(Op::kMin, a, b); }
  int Select(Cmp cmp, int a, int b, int x, int y);
  void Output(const std::string& name, int node);

  DType dtype_of(int node) const;
  // The kernel, validated; the first recorded misuse otherwise.
  absl::StatusOr<Kernel> Build() const;

 private:
  int Unary(Op op, int a);
  int Binary(Op op, int a, int b);
  int Add(Node node);
  bool Check(int id, const char* what);
  Kernel kernel_;
  absl::Status error_;
};

// Reference semantics: runs the kernel as a scalar loop over [0, n).
// Defined in interpreter.cc, target //compiler/codegen:interpreter.
// inputs[k] points to the k-th input's buffer (of its dtype), outputs[k] to
// the k-th output's buffer, scalars[k] is the k-th scalar parameter.
absl::Status Interpret(const Kernel& kernel, int64_t n,
                       const std::vector<const void*>& inputs,
                       const std::vector<void*>& outputs,
                       const std::vector<double>& scalars);

// Checks a launch's shape: n >= 0 and the numbers of inputs, outputs and
// scalars the kernel takes.
absl::Status CheckLaunch(const Kernel& kernel, int64_t n, size_t num_inputs,
                         size_t num_outputs, size_t num_scalars);

// Elements an input buffer must hold for a loop over [0, n).
int64_t RequiredInputElements(const InputSpec& input, int64_t n);

}  // namespace metafuse::codegen::kir
