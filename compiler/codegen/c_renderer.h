// The part of a kernel that every C-like printer writes the same way: the
// scalar expression DAG in C syntax. A target (compiler/codegen/cpp_printer.cc,
// compiler/codegen/cuda_printer.cc) derives from CRenderer and supplies the hooks
// (math function names, exp, special literals); it writes the entry point,
// the pointer prologue and the loop header itself, and calls
// BroadcastLoads() before and LoopBody() inside its loop.
//
// Names in the rendered text: `in<j>` is input j's typed pointer, `b<j>` a
// broadcast input's value (read once, before the loop), `s<j>` scalar j
// already rounded to its dtype, `out<j>` output j's pointer, `i` the element
// index (a signed 64-bit integer) and `v<id>` the value of node id. Every
// live node becomes one `const T v<id> = ...;`, so each op rounds to its
// dtype exactly as kir::Interpret does.
#pragma once

#include <string>

#include "compiler/codegen/kernel_ir.h"

namespace metafuse::codegen {

// The math functions a kernel calls besides exp (kernel_math.h's).
enum class MathFn { kLog, kTanh, kSqrt, kFabs, kPow };

class CRenderer {
 public:
  virtual ~CRenderer() = default;

  // The C type of a dtype.
  static const char* TypeName(kir::DType t);

  // `const T b<j> = in<j>[0];` per broadcast input, each line prefixed by
  // `indent`.
  std::string BroadcastLoads(const kir::Kernel& kernel, const std::string& indent) const;

  // The loop body: one statement per live node, then `out<j>[i] = v<id>;`
  // per output, each line prefixed by `indent`. Requires a valid kernel.
  std::string LoopBody(const kir::Kernel& kernel, const std::string& indent) const;

  // The expression that computes node `id` from the v<arg> of its
  // arguments.
  std::string Expression(const kir::Kernel& kernel, int id) const;

  // An exact literal of dtype t: a hexadecimal float, or SpecialLiteral for
  // infinities and NaN.
  std::string Literal(double value, kir::DType t) const;

 protected:
  // The function that computes `fn` in dtype t (e.g. "std::log", "logf").
  virtual std::string MathName(MathFn fn, kir::DType t) const = 0;
  // The function that computes metafuse's exp (compiler/codegen/kernel_math.h) in t.
  virtual std::string ExpName(kir::DType t) const = 0;
  // An expression for +inf, -inf or NaN (the quiet NaN with a clear sign
  // bit) of dtype t.
  virtual std::string SpecialLiteral(double value, kir::DType t) const = 0;
};

}  // namespace metafuse::codegen
