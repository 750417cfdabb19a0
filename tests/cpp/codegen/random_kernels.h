// A small generator of random valid kernel-IR kernels, for tests that check
// a printer against kir::Interpret beyond the hand-written kernels.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "compiler/codegen/kernel_ir.h"

namespace metafuse::codegen::testing {

// A kernel of both dtypes, every access pattern, scalars, and `num_ops`
// random ops over earlier values (casts inserted where dtypes differ), with
// up to three outputs. Same seed, same kernel (for a given compiler: the
// order in which two arg() calls of one op run is unspecified).
inline kir::Kernel RandomKernel(uint32_t seed, int num_ops = 24) {
  using kir::DType;
  std::mt19937 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
  kir::KernelBuilder b("random_" + std::to_string(seed));
  std::vector<int> pool[2];  // node ids by dtype: 0 f32, 1 f64
  auto dtype = [](int d) { return d == 0 ? DType::kF32 : DType::kF64; };
  const int num_inputs = 1 + pick(4);
  for (int j = 0; j < num_inputs; ++j) {
    const int d = pick(2);
    const auto access = static_cast<kir::Access>(pick(6));
    const int64_t inner = 1 + pick(9), mid = 1 + pick(4);
    pool[d].push_back(b.Input("in" + std::to_string(j), dtype(d), access,
                              kir::HasInner(access) ? inner : 1,
                              kir::HasMid(access) ? mid : 1));
  }
  for (int j = 0, s = pick(3); j < s; ++j) {
    const int d = pick(2);
    pool[d].push_back(b.Scalar("s" + std::to_string(j), dtype(d)));
  }
  // An argument of dtype d: an existing value, cast from the other dtype
  // when there is none, or a constant (exact in f32).
  auto arg = [&](int d) {
    if (!pool[d].empty() && pick(8) != 0) return pool[d][pick(pool[d].size())];
    if (!pool[1 - d].empty() && pick(2) == 0) {
      return b.Cast(pool[1 - d][pick(pool[1 - d].size())], dtype(d));
    }
    static const double kConsts[] = {0.5, -1.25, 3.0, 1e-3, -0.0, 7.5e5};
    const double v = kConsts[pick(6)];
    return b.Const(d == 0 ? static_cast<double>(static_cast<float>(v)) : v, dtype(d));
  };
  static const double kExponents[] = {1, 2, 3, 0.5, -1, -0.5, 1.7, -2.5};
  int last = -1;
  for (int o = 0; o < num_ops; ++o) {
    const int d = pick(2);
    int id = -1;
    switch (pick(20)) {
      case 0: id = b.Neg(arg(d)); break;
      case 1: id = b.Exp(arg(d)); break;
      case 2: id = b.Log(arg(d)); break;
      case 3: id = b.Tanh(arg(d)); break;
      case 4: id = b.Sigmoid(arg(d)); break;
      case 5: id = b.Relu(arg(d)); break;
      case 6: id = b.Sqrt(arg(d)); break;
      case 7: id = b.Rsqrt(arg(d)); break;
      case 8: id = b.Abs(arg(d)); break;
      case 9: id = b.Pow(arg(d), kExponents[pick(8)]); break;
      case 10: id = b.Add(arg(d), arg(d)); break;
      case 11: id = b.Sub(arg(d), arg(d)); break;
      case 12: case 13: id = b.Mul(arg(d), arg(d)); break;
      case 14: id = b.Div(arg(d), arg(d)); break;
      case 15: id = b.Max(arg(d), arg(d)); break;
      case 16: id = b.Min(arg(d), arg(d)); break;
      case 17: id = b.Cast(arg(1 - d), dtype(d)); break;
      default: {
        const int c = pick(2);
        id = b.Select(static_cast<kir::Cmp>(pick(5)), arg(c), arg(c), arg(d), arg(d));
      }
    }
    pool[d].push_back(id);
    last = id;
  }
  b.Output("out0", last);
  for (int j = 1, extra = pick(3); j <= extra; ++j) {
    const int d = pool[0].empty() ? 1 : (pool[1].empty() ? 0 : pick(2));
    b.Output("out" + std::to_string(j), pool[d][pick(pool[d].size())]);
  }
  return b.Build().value();
}

}  // namespace metafuse::codegen::testing
