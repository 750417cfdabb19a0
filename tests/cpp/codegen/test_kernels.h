// Kernels and data shared by the code-generation tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "compiler/codegen/kernel_ir.h"

// `haystack` (a string or string_view) contains `needle`.
#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

namespace metafuse::codegen::testing {

using kir::Access;
using kir::Cmp;
using kir::DType;

// Every op, every access pattern, a scalar parameter, casts both ways; one
// output per op family so that a mismatch names the op.
inline kir::Kernel AllOpsKernel(DType t) {
  const DType other = t == DType::kF32 ? DType::kF64 : DType::kF32;
  kir::KernelBuilder b(t == DType::kF32 ? "all_ops_f32" : "all_ops_f64");
  int x = b.Input("x", t);
  int y = b.Input("y", t);  // positive
  int row = b.Input("row", t, Access::kInner, 7);
  int col = b.Input("col", t, Access::kOuter, 5);
  int c = b.Input("c", t, Access::kBroadcast);
  int bias = b.Input("bias", t, Access::kMiddle, 4, 3);   // [., 1, 4] over [., 3, 4]
  int channel = b.Input("channel", t, Access::kPeriodic, 2, 3);  // [1, 3, 1] over [., 3, 2]
  int alpha = b.Scalar("alpha", t);
  int half = b.Const(0.5, t);
  int arith = b.Neg(b.Div(b.Sub(b.Mul(b.Add(x, y), alpha), row), b.Add(y, half)));
  b.Output("arith", arith);
  b.Output("exp", b.Exp(b.Mul(x, half)));
  b.Output("log", b.Log(y));
  b.Output("tanh", b.Tanh(x));
  b.Output("sigmoid", b.Sigmoid(x));
  b.Output("relu", b.Relu(x));
  b.Output("sqrt", b.Sqrt(y));
  b.Output("rsqrt", b.Rsqrt(y));
  b.Output("abs", b.Abs(col));
  b.Output("broadcasts", b.Sub(b.Mul(bias, x), channel));
  b.Output("max", b.Max(x, row));
  b.Output("min", b.Min(col, x));
  int p = b.Add(b.Add(b.Pow(y, 2), b.Pow(y, 3)), b.Add(b.Pow(y, 0.5), b.Pow(y, -1)));
  b.Output("pow_special", b.Add(p, b.Add(b.Pow(y, -0.5), b.Pow(y, 1))));
  b.Output("pow_call", b.Pow(y, 1.7));
  int sel = b.Add(b.Select(Cmp::kGt, x, c, y, x), b.Select(Cmp::kLt, x, c, x, row));
  sel = b.Add(sel, b.Select(Cmp::kGe, col, c, col, half));
  sel = b.Add(sel, b.Select(Cmp::kLe, x, row, half, c));
  b.Output("select", b.Add(sel, b.Select(Cmp::kEq, x, x, c, y)));
  // A value computed in the other dtype and brought back; a compare across.
  int wide = b.Cast(x, other);
  int sq = b.Mul(wide, wide);
  b.Output("cast_other", sq);
  b.Output("cast_back", b.Cast(b.Add(sq, b.Cast(y, other)), t));
  b.Output("select_other", b.Select(Cmp::kGt, sq, b.Cast(y, other), x, y));
  return *b.Build();
}

// Outputs that are inputs, broadcasts, scalars and constants themselves (no
// op in between), an unused input, and a dead node.
// Positional reads with long periods (a per-task bias over rows, a column,
// a per-channel vector over NCHW planes): every period a multiple of 16, so
// the JIT runs it row by row (compiler/codegen/llvm_printer.cc).
inline kir::Kernel RowsKernel(DType t) {
  kir::KernelBuilder b(t == DType::kF32 ? "rows_f32" : "rows_f64");
  int x = b.Input("x", t);
  int row = b.Input("row", t, Access::kInner, 32);
  int col = b.Input("col", t, Access::kOuter, 64);
  int bias = b.Input("bias", t, Access::kMiddle, 32, 3);       // [., 1, 32] over [., 3, 32]
  int channel = b.Input("channel", t, Access::kPeriodic, 48, 5);  // [1, 5, 1] over [., 5, 48]
  b.Output("sum", b.Add(b.Add(b.Mul(x, row), col), b.Sub(bias, channel)));
  b.Output("relu", b.Relu(b.Add(x, bias)));
  return *b.Build();
}

inline kir::Kernel PassThroughKernel(DType t) {
  kir::KernelBuilder b(t == DType::kF32 ? "pass_f32" : "pass_f64");
  int x = b.Input("x", t);
  b.Input("unused", t);
  int c = b.Input("c", t, Access::kBroadcast);
  int row = b.Input("row", t, Access::kInner, 3);
  int s = b.Scalar("s", t);
  b.Exp(x);  // dead
  b.Output("copy", x);
  b.Output("broadcast", c);
  b.Output("row_out", row);
  b.Output("scalar", s);
  b.Output("constant", b.Const(-0.0, t));
  b.Output("nan", b.Const(std::nan(""), t));
  b.Output("inf", b.Const(-INFINITY, t));
  b.Output("pow_one", b.Pow(b.Cast(c, t), 1));
  return *b.Build();
}

// Outputs computed with libm calls (log, pow): compared with a tolerance of
// 2 ulp; every other output (exp, sigmoid and tanh included: they use
// compiler/codegen/kernel_math.h everywhere) must match exactly.
inline bool IsTranscendental(const std::string& output) {
  for (const char* name : {"log", "pow_call"}) {
    if (output == name) return true;
  }
  return false;
}

// An Adam-like update: m, v, p in; m', v', p' out (9 ops, float32).
inline kir::Kernel AdamKernel(DType t = DType::kF32) {
  kir::KernelBuilder b(t == DType::kF32 ? "adam_f32" : "adam_f64");
  int p = b.Input("p", t), g = b.Input("g", t), m = b.Input("m", t), v = b.Input("v", t);
  int lr = b.Scalar("lr", t), b1 = b.Scalar("b1", t), b2 = b.Scalar("b2", t),
      eps = b.Scalar("eps", t);
  int one = b.Const(1.0, t);
  int m2 = b.Add(b.Mul(b1, m), b.Mul(b.Sub(one, b1), g));
  int v2 = b.Add(b.Mul(b2, v), b.Mul(b.Sub(one, b2), b.Mul(g, g)));
  int p2 = b.Sub(p, b.Div(b.Mul(lr, m2), b.Add(b.Sqrt(v2), eps)));
  b.Output("m_out", m2);
  b.Output("v_out", v2);
  b.Output("p_out", p2);
  return *b.Build();
}

// Buffers for a kernel over n elements: random inputs (x-like inputs in
// [-3, 3] with a few special values, inputs named "y" positive), zeroed
// outputs.
struct Buffers {
  std::vector<std::vector<char>> in, out;
  std::vector<const void*> in_ptrs;
  std::vector<void*> out_ptrs;
  std::vector<double> scalars;

  Buffers(const kir::Kernel& k, int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> sym(-3.0, 3.0), pos(0.05, 4.0);
    for (const kir::InputSpec& spec : k.inputs) {
      const int64_t count = std::max<int64_t>(1, kir::RequiredInputElements(spec, n));
      const size_t size = spec.dtype == DType::kF32 ? 4 : 8;
      in.emplace_back(count * size);
      for (int64_t j = 0; j < count; ++j) {
        double v = spec.name == "y" || spec.name == "v" ? pos(rng) : sym(rng);
        if (spec.name == "x" && count > 20) {
          if (j == 3) v = std::nan("");
          if (j == 5) v = -0.0;
          if (j == 11) v = INFINITY;
          if (j == 13) v = -INFINITY;
          if (j == 17) v = 0.0;
        }
        if (spec.dtype == DType::kF32) {
          float f = static_cast<float>(v);
          std::memcpy(in.back().data() + j * size, &f, size);
        } else {
          std::memcpy(in.back().data() + j * size, &v, size);
        }
      }
      in_ptrs.push_back(in.back().data());
    }
    for (const kir::OutputSpec& o : k.outputs) {
      const size_t size = k.nodes[o.node].dtype == DType::kF32 ? 4 : 8;
      out.emplace_back(std::max<int64_t>(1, n) * size, 0);
      out_ptrs.push_back(out.back().data());
    }
    for (size_t j = 0; j < k.scalars.size(); ++j) scalars.push_back(0.9 - 0.1 * j);
  }
};

// Distance in units in the last place (NaN == NaN; +0 == -0 is 0 apart).
inline int64_t UlpDistance(double a, double b, DType t) {
  if (std::isnan(a) && std::isnan(b)) return 0;
  if (std::isnan(a) || std::isnan(b)) return INT64_MAX;
  if (a == b) return 0;
  auto ordered = [&](double v) -> int64_t {
    if (t == DType::kF32) {
      float f = static_cast<float>(v);
      int32_t i;
      std::memcpy(&i, &f, 4);
      return i < 0 ? int64_t{INT32_MIN} - i : i;
    }
    int64_t i;
    std::memcpy(&i, &v, 8);
    return i < 0 ? INT64_MIN - i : i;
  };
  const int64_t d = ordered(a) - ordered(b);
  return d < 0 ? -d : d;
}

// Largest ulp distance between output `o` of two buffer sets.
inline int64_t MaxUlp(const kir::Kernel& k, size_t o, const Buffers& a, const Buffers& b,
                      int64_t n, int64_t* where = nullptr) {
  const DType t = k.nodes[k.outputs[o].node].dtype;
  int64_t worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    double va, vb;
    if (t == DType::kF32) {
      va = reinterpret_cast<const float*>(a.out[o].data())[i];
      vb = reinterpret_cast<const float*>(b.out[o].data())[i];
    } else {
      va = reinterpret_cast<const double*>(a.out[o].data())[i];
      vb = reinterpret_cast<const double*>(b.out[o].data())[i];
    }
    const int64_t d = UlpDistance(va, vb, t);
    if (d > worst) {
      worst = d;
      if (where) *where = i;
    }
  }
  return worst;
}

}  // namespace metafuse::codegen::testing
