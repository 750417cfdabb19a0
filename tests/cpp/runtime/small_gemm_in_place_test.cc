// runtime/compute/small_gemm_in_place called directly, on each instruction
// set of this CPU it accepts (AVX-512, AVX2), against a naive triple loop in
// double: every layout of A and B, beta 0 / 1 / other, and a sweep of sizes
// across the lane, vector-tile and row-tile boundaries (the masked tails,
// the dot-product forms for one output row or column, k = 0 and k = 1).
// Also: its masked loads and stores touch nothing past a matrix's last
// element (each operand ends at an inaccessible page), beta = 0 never
// reads C, and concurrent calls (per-thread transpose scratch) agree.
//
// The header documents no aliasing rule beyond C being written: A and B are
// const inputs, and every call here keeps C apart from them.
#include "runtime/compute/small_gemm_in_place.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "runtime/compute/cpu_isa.h"

namespace metafuse::runtime {
namespace {

std::vector<Isa> InPlaceIsas() {
  std::vector<Isa> isas;
  if (BestIsa() == Isa::kAvx512) isas.push_back(Isa::kAvx512);
  if (BestIsa() == Isa::kAvx512 || BestIsa() == Isa::kAvx2) isas.push_back(Isa::kAvx2);
  return isas;
}

const char* IsaName(Isa isa) { return isa == Isa::kAvx512 ? "avx512" : "avx2"; }

// The product in double, one multiply-add at a time, from the definition:
// op(A)[i][p] is A[p][i] when transposed, op(B)[p][j] likewise.
template <typename T>
std::vector<double> NaiveProduct(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                                 const T* a, const T* b, double beta, const T* c) {
  std::vector<double> out(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0.0;
      for (int64_t p = 0; p < k; ++p) {
        const double x = trans_a ? a[p * m + i] : a[i * k + p];
        const double y = trans_b ? b[j * k + p] : b[p * n + j];
        acc += x * y;
      }
      out[i * n + j] = beta == 0.0 ? acc : acc + beta * c[i * n + j];
    }
  }
  return out;
}

// Small integers: every product and partial sum below is an integer (or a
// half, with beta = -0.5) far below 2^24, exact in float and double whatever
// the order of additions, so results are compared bit for bit.
template <typename T>
std::vector<T> SmallIntegers(int64_t count, std::mt19937* gen) {
  std::uniform_int_distribution<int> pick(-4, 4);
  std::vector<T> v(count);
  for (T& x : v) x = static_cast<T>(pick(*gen));
  return v;
}

template <typename T>
void SweepExact() {
  std::mt19937 gen(11);
  // Rows across the tile heights (AVX-512 up to 12 / 8, AVX2 12 / 6 / 4) and
  // their splits; columns across 1, 2 and 3 vectors of 4, 8 or 16 lanes
  // and past one 48-column tile; depths across the transpose blocks.
  const int64_t ms[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 25};
  const int64_t ns[] = {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 47, 48, 49, 97};
  const int64_t ks[] = {0, 1, 2, 3, 7, 8, 9, 17, 40};
  for (Isa isa : InPlaceIsas()) {
    for (int64_t m : ms) {
      for (int64_t n : ns) {
        for (int64_t k : ks) {
          for (int layout = 0; layout < 4; ++layout) {
            const bool ta = layout & 1, tb = layout & 2;
            const std::vector<T> a = SmallIntegers<T>(m * k, &gen);
            const std::vector<T> b = SmallIntegers<T>(k * n, &gen);
            const std::vector<T> c0 = SmallIntegers<T>(m * n, &gen);
            for (T beta : {T(0), T(1), T(-0.5)}) {
              const std::vector<double> want =
                  NaiveProduct(ta, tb, m, n, k, a.data(), b.data(), beta, c0.data());
              std::vector<T> c = c0;
              SmallGemmInPlace(isa, ta, tb, m, n, k, a.data(), b.data(), beta, c.data());
              int mismatches = 0;
              for (int64_t e = 0; e < m * n && mismatches < 3; ++e) {
                if (static_cast<double>(c[e]) != want[e]) {
                  ++mismatches;
                  ADD_FAILURE() << IsaName(isa) << " ta=" << ta << " tb=" << tb << " m=" << m
                                << " n=" << n << " k=" << k << " beta=" << beta << " element "
                                << e << ": got " << c[e] << ", want " << want[e];
                }
              }
            }
          }
        }
      }
    }
  }
}

TEST(SmallGemmInPlace, ExactOnEveryTailFloat) { SweepExact<float>(); }
TEST(SmallGemmInPlace, ExactOnEveryTailDouble) { SweepExact<double>(); }

// Real-valued operands: the kernel's fused multiply-adds in T against the
// double loop. Each output is a sum of k products (plus beta C), so its
// rounding error is at most about (k + 2) unit roundoffs of T times the sum
// of the absolute values of its terms (the standard dot-product bound).
template <typename T>
void CheckReal() {
  std::mt19937 gen(3);
  std::normal_distribution<double> normal;
  const double u = std::numeric_limits<T>::epsilon() / 2;
  for (Isa isa : InPlaceIsas()) {
    for (int64_t m : {1, 10, 23}) {
      for (int64_t n : {1, 19, 40, 50}) {
        for (int64_t k : {1, 13, 64}) {
          for (int layout = 0; layout < 4; ++layout) {
            const bool ta = layout & 1, tb = layout & 2;
            std::vector<T> a(m * k), b(k * n), c(m * n);
            for (T& x : a) x = static_cast<T>(normal(gen));
            for (T& x : b) x = static_cast<T>(normal(gen));
            for (T& x : c) x = static_cast<T>(normal(gen));
            const T beta = T(0.75);
            const std::vector<double> want =
                NaiveProduct(ta, tb, m, n, k, a.data(), b.data(), beta, c.data());
            // The bound's magnitudes: the same loop over |A|, |B|, |C|.
            std::vector<T> abs_a(a), abs_b(b), abs_c(c);
            for (T& x : abs_a) x = std::abs(x);
            for (T& x : abs_b) x = std::abs(x);
            for (T& x : abs_c) x = std::abs(x);
            const std::vector<double> size = NaiveProduct(ta, tb, m, n, k, abs_a.data(),
                                                          abs_b.data(), beta, abs_c.data());
            SmallGemmInPlace(isa, ta, tb, m, n, k, a.data(), b.data(), beta, c.data());
            for (int64_t e = 0; e < m * n; ++e) {
              ASSERT_NEAR(c[e], want[e], (k + 2) * u * size[e])
                  << IsaName(isa) << " ta=" << ta << " tb=" << tb << " m=" << m << " n=" << n
                  << " k=" << k << " element " << e;
            }
          }
        }
      }
    }
  }
}

TEST(SmallGemmInPlace, RealValuesWithinTheDotProductBoundFloat) { CheckReal<float>(); }
TEST(SmallGemmInPlace, RealValuesWithinTheDotProductBoundDouble) { CheckReal<double>(); }

// `count` elements whose last one ends exactly where an inaccessible page
// begins: a load or store one element past the end faults.
template <typename T>
class AtPageEnd {
 public:
  explicit AtPageEnd(int64_t count) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t bytes = static_cast<size_t>(count) * sizeof(T);
    pages_ = (bytes + page - 1) / page + 1;
    base_ = static_cast<char*>(
        mmap(nullptr, pages_ * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    EXPECT_NE(base_, MAP_FAILED);
    guard_ = base_ + (pages_ - 1) * page;
    EXPECT_EQ(mprotect(guard_, page, PROT_NONE), 0);
    data_ = reinterpret_cast<T*>(guard_ - bytes);
  }
  ~AtPageEnd() { munmap(base_, pages_ * sysconf(_SC_PAGESIZE)); }
  T* data() { return data_; }

 private:
  size_t pages_ = 0;
  char* base_ = nullptr;
  char* guard_ = nullptr;
  T* data_ = nullptr;
};

template <typename T>
void CheckNothingPastTheEnd() {
  std::mt19937 gen(5);
  // Partial vectors everywhere: n and k not multiples of any lane count,
  // plus the one-row and one-column (dot product) forms.
  const int64_t shapes[][3] = {{7, 13, 5}, {1, 21, 11}, {19, 1, 29}, {5, 35, 1}, {13, 49, 3}};
  for (Isa isa : InPlaceIsas()) {
    for (const auto& s : shapes) {
      const int64_t m = s[0], n = s[1], k = s[2];
      for (int layout = 0; layout < 4; ++layout) {
        const bool ta = layout & 1, tb = layout & 2;
        const std::vector<T> a0 = SmallIntegers<T>(m * k, &gen), b0 = SmallIntegers<T>(k * n, &gen),
                             c0 = SmallIntegers<T>(m * n, &gen);
        AtPageEnd<T> a(m * k), b(k * n), c(m * n);
        std::copy(a0.begin(), a0.end(), a.data());
        std::copy(b0.begin(), b0.end(), b.data());
        std::copy(c0.begin(), c0.end(), c.data());
        const std::vector<double> want =
            NaiveProduct(ta, tb, m, n, k, a0.data(), b0.data(), 2.0, c0.data());
        SmallGemmInPlace(isa, ta, tb, m, n, k, a.data(), b.data(), T(2), c.data());
        for (int64_t e = 0; e < m * n; ++e) {
          ASSERT_EQ(static_cast<double>(c.data()[e]), want[e])
              << IsaName(isa) << " ta=" << ta << " tb=" << tb << " m=" << m << " n=" << n
              << " k=" << k << " element " << e;
        }
      }
    }
  }
}

TEST(SmallGemmInPlace, TouchesNothingPastAMatrixFloat) { CheckNothingPastTheEnd<float>(); }
TEST(SmallGemmInPlace, TouchesNothingPastAMatrixDouble) { CheckNothingPastTheEnd<double>(); }

TEST(SmallGemmInPlace, BetaZeroNeverReadsC) {
  std::mt19937 gen(9);
  for (Isa isa : InPlaceIsas()) {
    for (int64_t k : {0, 1, 6}) {
      for (int layout = 0; layout < 4; ++layout) {
        const bool ta = layout & 1, tb = layout & 2;
        const int64_t m = 9, n = 21;
        const std::vector<float> a = SmallIntegers<float>(m * k, &gen),
                                 b = SmallIntegers<float>(k * n, &gen);
        // NaN * 0 is NaN: a C that was read would show.
        std::vector<float> c(m * n, std::numeric_limits<float>::quiet_NaN());
        SmallGemmInPlace(isa, ta, tb, m, n, k, a.data(), b.data(), 0.f, c.data());
        const std::vector<double> want =
            NaiveProduct(ta, tb, m, n, k, a.data(), b.data(), 0.0, c.data());
        for (int64_t e = 0; e < m * n; ++e) {
          ASSERT_EQ(static_cast<double>(c[e]), want[e])
              << IsaName(isa) << " k=" << k << " layout " << layout << " element " << e;
        }
      }
    }
  }
}

TEST(SmallGemmInPlace, EmptyOutputsWriteNothing) {
  for (Isa isa : InPlaceIsas()) {
    float a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 3, 4};
    float c[4] = {7, 7, 7, 7};
    SmallGemmInPlace(isa, false, false, 0, 2, 2, a, b, 1.f, c);
    SmallGemmInPlace(isa, false, true, 2, 0, 2, a, b, 1.f, c);
    for (float x : c) EXPECT_EQ(x, 7.f) << IsaName(isa);
  }
}

// A transposed B with more than one output row goes through a per-thread
// copy: threads running different shapes at once each get their own.
TEST(SmallGemmInPlace, ConcurrentTransposedProductsAgree) {
  for (Isa isa : InPlaceIsas()) {
    std::vector<std::thread> threads;
    std::vector<int> failures(4, 0);
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([isa, t, &failures] {
        std::mt19937 gen(100 + t);
        const int64_t m = 5 + t, n = 17 + 9 * t, k = 11 + 5 * t;
        for (int round = 0; round < 50; ++round) {
          const std::vector<double> a = SmallIntegers<double>(m * k, &gen),
                                    b = SmallIntegers<double>(k * n, &gen);
          std::vector<double> c(m * n, 0.0);
          SmallGemmInPlace(isa, false, true, m, n, k, a.data(), b.data(), 0.0, c.data());
          if (c != NaiveProduct(false, true, m, n, k, a.data(), b.data(), 0.0, c.data())) {
            ++failures[t];
          }
        }
      });
    }
    for (std::thread& th : threads) th.join();
    for (int t = 0; t < 4; ++t) EXPECT_EQ(failures[t], 0) << IsaName(isa) << " thread " << t;
  }
}

}  // namespace
}  // namespace metafuse::runtime
