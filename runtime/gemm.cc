#include "runtime/gemm.h"

#include <dlfcn.h>

#include <ATen/ATen.h>
#include <ATen/CPUFunctions.h>
#include <ATen/Parallel.h>

#include "runtime/buffer_ownership.h"
#include "runtime/small_gemm.h"

namespace metafuse::runtime {
namespace {

template <typename T>
using FortranGemm = void (*)(const char*, const char*, const int*, const int*, const int*,
                             const T*, const T*, const int*, const T*, const int*, const T*,
                             T*, const int*);

struct Blas {
  FortranGemm<float> sgemm = nullptr;
  FortranGemm<double> dgemm = nullptr;
};

const Blas& FindBlas() {
  static const Blas blas = [] {
    Blas b;
    // The BLAS LibTorch links is already loaded; RTLD_NOLOAD never loads one.
    for (const char* name : {"libblas.so.3", "libopenblas.so.0", "libblis.so.4"}) {
      void* handle = dlopen(name, RTLD_LAZY | RTLD_NOLOAD);
      if (handle == nullptr) continue;
      b.sgemm = reinterpret_cast<FortranGemm<float>>(dlsym(handle, "sgemm_"));
      b.dgemm = reinterpret_cast<FortranGemm<double>>(dlsym(handle, "dgemm_"));
      if (b.sgemm && b.dgemm) return b;
    }
    b.sgemm = reinterpret_cast<FortranGemm<float>>(dlsym(RTLD_DEFAULT, "sgemm_"));
    b.dgemm = reinterpret_cast<FortranGemm<double>>(dlsym(RTLD_DEFAULT, "dgemm_"));
    if (!b.sgemm || !b.dgemm) b = Blas{};
    return b;
  }();
  return blas;
}

// Row-major C[M,N] = op(A)[M,K] op(B)[K,N] is column-major
// C^T = op(B)^T op(A)^T, so B goes first.
template <typename T>
void RowMajorGemm(FortranGemm<T> gemm, bool ta, bool tb, int m, int n, int k, const T* a,
                  const T* b, T beta, T* c) {
  const char trans_b = tb ? 'T' : 'N', trans_a = ta ? 'T' : 'N';
  const int ldb = tb ? k : n, lda = ta ? m : k, ldc = n;
  const T one = 1;
  gemm(&trans_b, &trans_a, &n, &m, &k, &one, b, &ldb, a, &lda, &beta, c, &ldc);
}

}  // namespace

bool DirectBlasAvailable() { return FindBlas().sgemm != nullptr; }

torch::jit::Operation MakeGemmOperation(const GemmPlan& plan) {
  const bool ta = plan.trans_a, tb = plan.trans_b;
  // A third input is an accumulator: C = acc + op(A) op(B) (lower_matmul
  // folds add(acc, product) into the product).
  const bool accumulate = plan.accumulate;
  return [ta, tb, accumulate](torch::jit::Stack& stack) {
    at::Tensor acc;
    if (accumulate) {
      acc = std::move(stack.back()).toTensor();
      stack.pop_back();
    }
    at::Tensor b = std::move(stack.back()).toTensor();
    stack.pop_back();
    at::Tensor a = std::move(stack.back()).toTensor();
    const Blas& blas = FindBlas();
    // 2-D matrices, or 3-D stacks of them (aten::bmm: one product per task).
    const int64_t rank = a.dim();
    const bool direct = blas.sgemm != nullptr && a.scalar_type() == b.scalar_type() &&
                        (a.scalar_type() == at::kFloat || a.scalar_type() == at::kDouble) &&
                        a.is_cpu() && b.is_cpu() && (rank == 2 || rank == 3) &&
                        b.dim() == rank && (rank == 2 || a.size(0) == b.size(0)) &&
                        a.numel() < (1LL << 31) && b.numel() < (1LL << 31);
    if (!direct) {
      auto swap = [](const at::Tensor& x) { return x.transpose(-2, -1); };
      const at::Tensor opa = ta ? swap(a) : a, opb = tb ? swap(b) : b;
      if (accumulate && !a.is_cpu()) {
        // CUDA: one cuBLAS call with beta = 1 (the transposes are strides).
        stack.back() = rank == 3 ? at::baddbmm(acc, opa, opb) : at::addmm(acc, opa, opb);
        return;
      }
      at::Tensor product = rank == 3 ? at::bmm(opa, opb) : at::mm(opa, opb);
      stack.back() = accumulate ? at::add(acc, product) : product;
      return;
    }
    // Logical operands op(a), op(b); the data are read row-major, so a
    // column-major matrix is its row-major transpose with the flag flipped.
    const int64_t rows = rank - 2, cols = rank - 1;
    const int64_t m = ta ? a.size(cols) : a.size(rows), k = ta ? a.size(rows) : a.size(cols);
    const int64_t n = tb ? b.size(rows) : b.size(cols);
    const int64_t batch = rank == 3 ? a.size(0) : 1;
    bool fa = ta, fb = tb;
    auto row_major = [rows, cols](at::Tensor& x, bool& flag) {
      if (x.is_contiguous()) return;
      if (x.transpose(rows, cols).is_contiguous()) {
        x = x.transpose(rows, cols);
        flag = !flag;
        return;
      }
      x = x.contiguous();
    };
    row_major(a, fa);
    row_major(b, fb);
    TORCH_CHECK((fb ? b.size(cols) : b.size(rows)) == k, "metafuse::gemm: inner sizes differ (",
                k, " and ", fb ? b.size(cols) : b.size(rows), ")");
    std::vector<int64_t> out_sizes = {m, n};
    if (rank == 3) out_sizes.insert(out_sizes.begin(), batch);
    at::Tensor c;
    if (accumulate) {
      TORCH_CHECK(acc.sizes() == c10::IntArrayRef(out_sizes) &&
                      acc.scalar_type() == a.scalar_type(),
                  "metafuse::gemm: accumulator ", acc.toString(), " ", acc.sizes(),
                  " does not match the product ", c10::IntArrayRef(out_sizes));
      // The accumulator's buffer when nothing else holds it (buffer reuse);
      // a copy otherwise.
      c = BufferIsFree(acc) ? std::move(acc) : acc.clone(at::MemoryFormat::Contiguous);
    } else {
      c = at::empty(out_sizes, a.options());
    }
    const double beta = accumulate ? 1.0 : 0.0;
    if (k == 0 || m == 0 || n == 0) {
      if (!accumulate) c.zero_();
      stack.back() = std::move(c);
      return;
    }
    if (PreferSmallGemm(m, n, k)) {
      // The tasks of a batched product split over ATen's threads when the
      // product has at least ~1M multiply-adds, in chunks of at least
      // ~256k: below that a fork-join costs more than it saves (the
      // sinusoid's 25 x 10x40x40 products ran slower at 2 threads split).
      const int64_t work = std::max<int64_t>(1, m * n * k);
      const int64_t grain = batch * work < (int64_t{1} << 20)
                                ? batch
                                : std::max<int64_t>(1, (int64_t{1} << 18) / work);
      at::parallel_for(0, batch, grain, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          if (a.scalar_type() == at::kFloat) {
            SmallGemm(fa, fb, m, n, k, a.data_ptr<float>() + i * m * k,
                      b.data_ptr<float>() + i * k * n, static_cast<float>(beta),
                      c.data_ptr<float>() + i * m * n);
          } else {
            SmallGemm(fa, fb, m, n, k, a.data_ptr<double>() + i * m * k,
                      b.data_ptr<double>() + i * k * n, beta, c.data_ptr<double>() + i * m * n);
          }
        }
      });
      stack.back() = std::move(c);
      return;
    }
    // One GEMM per task, one after another: the BLAS LibTorch loads here
    // (Debian's serial OpenBLAS) shares its work buffers between calls, so
    // concurrent calls from several threads corrupt each other's results.
    for (int64_t i = 0; i < batch; ++i) {
      if (a.scalar_type() == at::kFloat) {
        RowMajorGemm<float>(blas.sgemm, fa, fb, m, n, k, a.data_ptr<float>() + i * m * k,
                            b.data_ptr<float>() + i * k * n, static_cast<float>(beta),
                            c.data_ptr<float>() + i * m * n);
      } else {
        RowMajorGemm<double>(blas.dgemm, fa, fb, m, n, k, a.data_ptr<double>() + i * m * k,
                             b.data_ptr<double>() + i * k * n, beta,
                             c.data_ptr<double>() + i * m * n);
      }
    }
    stack.back() = std::move(c);
  };
}

}  // namespace metafuse::runtime
