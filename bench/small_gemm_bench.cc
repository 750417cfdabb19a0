// runtime/compute/small_gemm against the Fortran BLAS LibTorch links (Debian: OpenBLAS
// through libblas.so.3), float32, every layout, best of 5 timed loops each.
//   bazel run //bench:small_gemm_bench
#include "runtime/compute/small_gemm.h"

#include <chrono>
#include <cstdio>
#include <random>
#include <vector>
#include <algorithm>
extern "C" void sgemm_(const char*, const char*, const int*, const int*, const int*, const float*, const float*, const int*, const float*, const int*, const float*, float*, const int*);
using namespace metafuse::runtime;
void blas(bool ta, bool tb, int m, int n, int k, const float* a, const float* b, float* c) {
  const char TB = tb ? 'T' : 'N', TA = ta ? 'T' : 'N'; int ldb = tb ? k : n, lda = ta ? m : k, ldc = n; float one = 1, zero = 0;
  sgemm_(&TB, &TA, &n, &m, &k, &one, b, &ldb, a, &lda, &zero, c, &ldc);
}
int main() {
  std::mt19937 g(0); std::uniform_real_distribution<float> d(-1, 1);
  int shapes[][3] = {{10,40,40},{10,40,1},{10,1,40},{40,40,10},{1,40,10},{40,1,10},{75,64,64},{64,64,64},{128,128,128},{256,256,256},{100,256,256},{512,64,64}};
  for (auto& s : shapes) for (int t = 0; t < 4; ++t) {
    int m = s[0], n = s[1], k = s[2]; bool ta = t & 1, tb = t & 2;
    std::vector<float> a(m*k), b(k*n), c1(m*n), c2(m*n);
    for (auto& x : a) x = d(g); for (auto& x : b) x = d(g);
    double err = 0;
    blas(ta,tb,m,n,k,a.data(),b.data(),c1.data()); SmallGemm(ta,tb,m,n,k,a.data(),b.data(),0.f,c2.data());
    for (int i = 0; i < m*n; ++i) err = std::max(err, (double)std::abs(c1[i]-c2[i]));
    int reps = std::max(10, (int)(2e8 / (2.0*m*n*k+1000)));
    auto time = [&](auto f){ double best=1e9; for (int r=0;r<5;++r){ auto t0=std::chrono::steady_clock::now(); for(int i=0;i<reps;++i) f(); auto t1=std::chrono::steady_clock::now(); best=std::min(best, std::chrono::duration<double,std::micro>(t1-t0).count()/reps);} return best; };
    double tb_ = time([&]{ blas(ta,tb,m,n,k,a.data(),b.data(),c1.data()); });
    double ts_ = time([&]{ SmallGemm(ta,tb,m,n,k,a.data(),b.data(),0.f,c2.data()); });
    printf("%4d %4d %4d ta%d tb%d  blas %8.3f us  small %8.3f us  speedup %5.2fx  err %.2e (%s)\n", m,n,k,ta,tb,tb_,ts_,tb_/ts_,err,SmallGemmIsa());
  }
}
