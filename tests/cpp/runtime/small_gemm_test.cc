// runtime/compute/small_gemm against a plain triple loop accumulated in long double,
// on every instruction set this CPU has, both layouts of both operands,
// shapes that hit every micro-tile (rows 1-12, 1-3 vectors, partial
// vectors), the dot-product and outer-product forms, and beta 0 / 1 / other.
#include "runtime/compute/small_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace metafuse::runtime {
namespace {

template <typename T>
std::vector<T> Random(size_t count, std::mt19937& generator) {
  std::uniform_real_distribution<double> uniform(-1, 1);
  std::vector<T> values(count);
  for (T& v : values) v = static_cast<T>(uniform(generator));
  return values;
}

// C = op(A) op(B) + beta C, each term exact in long double.
template <typename T>
std::vector<long double> Reference(bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                                   const std::vector<T>& a, const std::vector<T>& b, T beta,
                                   const std::vector<T>& c) {
  std::vector<long double> out(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      long double sum = beta != T(0) ? static_cast<long double>(beta) * c[i * n + j] : 0;
      for (int64_t p = 0; p < k; ++p)
        sum += static_cast<long double>(ta ? a[p * m + i] : a[i * k + p]) *
               (tb ? b[j * k + p] : b[p * n + j]);
      out[i * n + j] = sum;
    }
  return out;
}

std::vector<std::string> IsasOfThisCpu() {
  std::vector<std::string> isas = {"sse2"};
  for (const char* isa : {"avx2", "avx512"}) {
    try {
      float x = 1, y = 1, z = 0;
      SmallGemmOn(isa, false, false, 1, 1, 1, &x, &y, 0.f, &z);
      isas.push_back(isa);
    } catch (const std::invalid_argument&) {
    }
  }
  return isas;
}

template <typename T>
void CheckAllShapes(double tolerance) {
  std::mt19937 generator(7);
  const int64_t sizes[][3] = {{1, 1, 1},  {10, 40, 40}, {10, 1, 40}, {40, 40, 10}, {1, 40, 10},
                              {6, 48, 3}, {7, 17, 5},   {13, 33, 9}, {5, 100, 1}, {75, 64, 64},
                              {3, 5, 0},  {11, 8, 130},
                              // AVX-512 kernels: tiles of up to 12 rows for
                              // one or two vectors, 8 for three; one output
                              // column or row (dot products); one step
                              // (outer products); transposes in 8x8 blocks
                              // with ragged edges.
                              {12, 16, 7}, {24, 32, 4}, {25, 17, 11}, {17, 1, 37},
                              {1, 23, 37}, {1, 1, 40},  {40, 1, 10},  {1, 40, 1},
                              {9, 41, 1},  {16, 24, 19}, {100, 48, 20}};
  for (const std::string& isa : IsasOfThisCpu()) {
    for (const auto& size : sizes) {
      const int64_t m = size[0], n = size[1], k = size[2];
      for (int layout = 0; layout < 4; ++layout) {
        const bool ta = layout & 1, tb = layout & 2;
        for (T beta : {T(0), T(1), T(-0.5)}) {
          const auto a = Random<T>(m * k, generator), b = Random<T>(k * n, generator);
          auto c = Random<T>(m * n, generator);
          const auto expected = Reference(ta, tb, m, n, k, a, b, beta, c);
          if (beta == T(0)) std::fill(c.begin(), c.end(), T(NAN));  // never read
          SmallGemmOn(isa.c_str(), ta, tb, m, n, k, a.data(), b.data(), beta, c.data());
          for (int64_t i = 0; i < m * n; ++i)
            ASSERT_NEAR(static_cast<double>(c[i]), static_cast<double>(expected[i]),
                        tolerance * (1 + k))
                << isa << " m=" << m << " n=" << n << " k=" << k << " ta=" << ta
                << " tb=" << tb << " beta=" << beta << " at " << i;
        }
      }
    }
  }
}

TEST(SmallGemm, FloatMatchesTheExactProductOnEveryInstructionSet) {
  CheckAllShapes<float>(1e-6);
}

TEST(SmallGemm, DoubleMatchesTheExactProductOnEveryInstructionSet) {
  CheckAllShapes<double>(1e-14);
}

TEST(SmallGemm, TheDefaultPathIsTheBestInstructionSet) {
  const std::vector<std::string> isas = IsasOfThisCpu();
  EXPECT_EQ(std::string(SmallGemmIsa()), isas.back());
}

TEST(SmallGemm, UnknownInstructionSetIsRefusedByName) {
  float x = 1, y = 1, z = 0;
  try {
    SmallGemmOn("neon", false, false, 1, 1, 1, &x, &y, 0.f, &z);
    FAIL() << "no error";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("`isa` must be sse2, avx2 or avx512"),
              std::string::npos)
        << error.what();
  }
}

TEST(SmallGemm, PreferredOnlyUpToTheMeasuredSizes) {
  EXPECT_TRUE(PreferSmallGemm(10, 40, 40));
  EXPECT_TRUE(PreferSmallGemm(256, 256, 256));
  EXPECT_FALSE(PreferSmallGemm(10, 512, 40));
  EXPECT_FALSE(PreferSmallGemm(10, 40, 512));
  EXPECT_FALSE(PreferSmallGemm(1024, 256, 256));
}

}  // namespace
}  // namespace metafuse::runtime
