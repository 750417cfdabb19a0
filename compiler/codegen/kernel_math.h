// metafuse's exp and tanh for kernels: the definitions shared by the reference
// interpreter (compiler/codegen/kernel_ir.cc), the printed C++ (compiler/codegen/cpp_printer.cc
// embeds this file's text in every source it prints) and the LLVM printer
// (compiler/codegen/llvm_printer.cc, runtime/jit/jit_kernel.cc emits the same operations in the same order).
// Unlike a libm call it is branch-free arithmetic, so element loops that use
// it vectorize; the three back ends agree bit for bit, and it is within 2 ulp
// of the correctly rounded exp for normal results (tests/cpp/codegen).
//
//   k = round-to-nearest-even(x * log2(e))    (the 1.5 * 2^mantissa trick)
//   r = (x - k * ln2_hi) - k * ln2_lo          (Cody-Waite: k * ln2_hi exact)
//   p = Taylor polynomial of e^r, Horner       (degree 7 f32, 13 f64)
//   exp(x) = p * 2^(k/2) * 2^(k - k/2)         (two steps reach subnormals)
// NaN gives NaN, x above log(max) gives +inf, x below the subnormal range 0.
//
// Standalone C++17 (no metafuse or absl includes): it is pasted into
// generated sources. Build without -ffast-math and without FP contraction;
// g++ loop-vectorizes it with -fno-math-errno -fno-trapping-math (neither
// changes a result).
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>

namespace mf_kernel_math {

template <typename T>
struct ExpConstants;

template <>
struct ExpConstants<float> {
  using Bits = int32_t;  // same size as the float
  static constexpr float kMax = 88.72283935546875f;    // above: +inf
  static constexpr float kMin = -103.972084045410156f;  // below: 0
  static constexpr float kLog2e = 1.44269502162933349609f;
  static constexpr float kRound = 12582912.0f;  // 1.5 * 2^23
  static constexpr float kLn2Hi = 0.693359375f;
  static constexpr float kLn2Lo = -2.12194440e-4f;
  static constexpr int kBias = 127, kMantissa = 23, kDegree = 7;
  static constexpr float kCoeff[14] = {1.0f, 1.0f, 1.0f / 2, 1.0f / 6, 1.0f / 24,
                                       1.0f / 120, 1.0f / 720, 1.0f / 5040};
};

template <>
struct ExpConstants<double> {
  using Bits = int64_t;
  static constexpr double kMax = 709.782712893383973096;
  static constexpr double kMin = -745.133219101941108420;
  static constexpr double kLog2e = 1.44269504088896338700;
  static constexpr double kRound = 6755399441055744.0;  // 1.5 * 2^52
  static constexpr double kLn2Hi = 6.93147180369123816490e-01;
  static constexpr double kLn2Lo = 1.90821492927058770002e-10;
  static constexpr int kBias = 1023, kMantissa = 52, kDegree = 13;
  static constexpr double kCoeff[14] = {
      1.0, 1.0, 1.0 / 2, 1.0 / 6, 1.0 / 24, 1.0 / 120, 1.0 / 720, 1.0 / 5040,
      1.0 / 40320, 1.0 / 362880, 1.0 / 3628800, 1.0 / 39916800,
      1.0 / 479001600, 1.0 / 6227020800};
};

// 2^m for m in the normal exponent range, by building the bits.
template <typename T>
inline T Pow2(int32_t m) {
  using C = ExpConstants<T>;
  const typename C::Bits bits = static_cast<typename C::Bits>(m + C::kBias) << C::kMantissa;
  T out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

template <typename T>
inline T Exp(T x) {
  using C = ExpConstants<T>;
  // Out-of-range and NaN inputs are computed on 0 and replaced at the end,
  // so every lane runs the same arithmetic.
  const bool in_range = (x >= C::kMin) & (x <= C::kMax);  // no branch
  const T xs = in_range ? x : T(0);
  const T k = (xs * C::kLog2e + C::kRound) - C::kRound;
  const T r = (xs - k * C::kLn2Hi) - k * C::kLn2Lo;
  T p = C::kCoeff[C::kDegree];
#pragma GCC unroll 16
  for (int d = C::kDegree - 1; d >= 0; --d) p = p * r + C::kCoeff[d];
  const int32_t ki = static_cast<int32_t>(k);
  const int32_t k1 = ki / 2;
  const T y = p * Pow2<T>(k1) * Pow2<T>(ki - k1);
  const T inf = std::numeric_limits<T>::infinity();
  return in_range ? y : (x > C::kMax ? inf : (x < C::kMin ? T(0) : x));
}

// tanh, branch-free on top of Exp (libm's tanh is a call, and a loop with a
// call stays scalar: a GRU cell's gates ran 10x slower than vectorized),
// computed in double:
//   |x| < 0.55: x * (odd Taylor series of tanh in x^2), Horner (19 terms:
//               the first term left out is below 0.1 ulp there);
//   otherwise:  sign(x) (1 - e) / (1 + e), e = Exp(-2|x|) <= e^-1.1, so the
//               subtraction loses at most a bit.
// Within 3 ulp of libm's double tanh; a float argument is widened and the
// result rounded once, so float32 tanh is libm's up to rare double
// roundings (a float32 version of the same formulas, 3 ulp off, moved a
// GRU's Adam meta-gradient twice as far from the float64 truth). NaN gives
// NaN, +-inf gives +-1, -0 gives -0 (tests/cpp/codegen).
struct TanhConstants {
  static constexpr double kSmall = 0.55;
  static constexpr int kTerms = 19;
  static constexpr double kCoeff[19] = {
      1.0, -0.33333333333333331, 0.13333333333333333, -0.053968253968253971,
      0.021869488536155203, -0.0088632355299021973, 0.0035921280365724811,
      -0.0014558343870513183, 0.00059002744094558595, -0.00023912911424355248,
      9.6915379569294509e-05, -3.9278323883316833e-05, 1.5918905069328964e-05,
      -6.4516892156554306e-06, 2.6147711512907546e-06, -1.0597268320104654e-06,
      4.2949110782738057e-07, -1.7406618963571648e-07, 7.0546369464009681e-08};
};

inline double Tanh(double x) {
  using C = TanhConstants;
  const bool negative = x < 0.0;
  const double a = negative ? -x : x;  // NaN stays NaN
  const double s = x * x;
  double p = C::kCoeff[C::kTerms - 1];
#pragma GCC unroll 20
  for (int d = C::kTerms - 2; d >= 0; --d) p = p * s + C::kCoeff[d];
  const double small = x * p;
  const double e = Exp(-2.0 * a);
  const double big = (1.0 - e) / (1.0 + e);
  const double away = negative ? -big : big;
  return a < C::kSmall ? small : away;
}

inline float Tanh(float x) { return static_cast<float>(Tanh(static_cast<double>(x))); }

}  // namespace mf_kernel_math
