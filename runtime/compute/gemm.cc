#include "runtime/compute/gemm.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <type_traits>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUFunctions.h>
#include <ATen/Parallel.h>

#include "runtime/compute/buffer_ownership.h"
#include "runtime/compute/gemm_choice.h"
#include "runtime/compute/small_gemm.h"

namespace metafuse::runtime {
namespace {

template <typename T>
using FortranGemm = void (*)(const char*, const char*, const int*, const int*, const int*,
                             const T*, const T*, const int*, const T*, const int*, const T*,
                             T*, const int*);

struct Blas {
  FortranGemm<float> sgemm = nullptr;
  FortranGemm<double> dgemm = nullptr;
  std::string library;  // the file sgemm_ comes from (names the GEMM choices)
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
    Dl_info info;
    if (b.sgemm && dladdr(reinterpret_cast<void*>(b.sgemm), &info) && info.dli_fname) {
      b.library = info.dli_fname;
    }
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

// Seconds per product of one task's operands with `kernel`: one loop long
// enough (~20 us) for the clock, into a scratch output (gemm_choice.cc
// alternates the kernels and keeps each one's best of three).
template <typename T>
double TimeOneProduct(GemmKernel kernel, const Blas& blas, bool ta, bool tb, int64_t m,
                      int64_t n, int64_t k, const T* a, const T* b) {
  std::vector<T> c(static_cast<size_t>(m * n));
  FortranGemm<T> gemm;
  if constexpr (std::is_same_v<T, float>) gemm = blas.sgemm; else gemm = blas.dgemm;
  auto once = [&] {
    if (kernel == GemmKernel::kSmall) {
      SmallGemm(ta, tb, m, n, k, a, b, T(0), c.data());
    } else {
      RowMajorGemm<T>(gemm, ta, tb, m, n, k, a, b, T(0), c.data());
    }
  };
  using Clock = std::chrono::steady_clock;
  once();  // warm: scratch, caches
  auto start = Clock::now();
  once();
  const double single = std::chrono::duration<double>(Clock::now() - start).count();
  const int reps = static_cast<int>(std::clamp(20e-6 / std::max(single, 1e-9), 1.0, 2000.0));
  start = Clock::now();
  for (int r = 0; r < reps; ++r) once();
  return std::chrono::duration<double>(Clock::now() - start).count() / reps;
}

// One GEMM instruction's memory of the kernel chosen for its last shape,
// so that a repeated call does not look the choice up again.
struct KernelMemo {
  std::mutex mutex;
  bool valid = false;
  GemmShape shape;
  GemmKernel kernel = GemmKernel::kBlas;
};

bool SameShape(const GemmShape& x, const GemmShape& y) {
  return x.f64 == y.f64 && x.trans_a == y.trans_a && x.trans_b == y.trans_b && x.m == y.m &&
         x.n == y.n && x.k == y.k;
}

}  // namespace

bool DirectBlasAvailable() { return FindBlas().sgemm != nullptr; }

std::mutex& BlasMutex() {
  static std::mutex mutex;
  return mutex;
}

bool TryRowMajorSgemm(bool trans_a, int m, int n, int k, const float* a, const float* b,
                      float beta, float* c) {
  const Blas& blas = FindBlas();
  TORCH_CHECK(blas.sgemm != nullptr, "metafuse: no BLAS sgemm_ is loaded in this process");
  std::unique_lock<std::mutex> lock(BlasMutex(), std::try_to_lock);
  if (!lock.owns_lock()) return false;
  // The measured choice of this shape (runtime/compute/gemm_choice.h): where the
  // BLAS runs an older ISA's kernels (Debian's OpenBLAS takes its Haswell
  // ones on a Zen 5 core), runtime/compute/small_gemm's AVX-512 kernel is faster.
  // Remembered per thread: a Winograd convolution asks for one shape per
  // block and point.
  thread_local GemmShape last_shape;
  thread_local GemmKernel last_kernel = GemmKernel::kBlas;
  thread_local bool known = false;
  const GemmShape shape{false, trans_a, false, m, n, k};
  if (!known || !SameShape(last_shape, shape)) {
    last_kernel = ChooseGemmKernel(shape, blas.library, [&](GemmKernel candidate) {
      return TimeOneProduct<float>(candidate, blas, trans_a, false, m, n, k, a, b);
    });
    last_shape = shape;
    known = true;
  }
  if (last_kernel == GemmKernel::kSmall) return false;
  RowMajorGemm<float>(blas.sgemm, trans_a, false, m, n, k, a, b, beta, c);
  return true;
}

torch::jit::Operation MakeGemmOperation(const GemmPlan& plan) {
  const bool ta = plan.trans_a, tb = plan.trans_b;
  // A third input is an accumulator: C = acc + op(A) op(B) (lower_matmul
  // folds add(acc, product) into the product).
  const bool accumulate = plan.accumulate;
  auto memo = std::make_shared<KernelMemo>();
  return [ta, tb, accumulate, memo](torch::jit::Stack& stack) {
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
    // Each task's matrix row-major (or column-major, the flag flipped); the
    // tasks `step` elements apart: 0 for a stack expanded from one matrix
    // (the shared meta-parameters), more than a matrix for a slice of a
    // larger stack (a task's support rows). Neither needs a copy.
    auto row_major = [rows, cols, rank](at::Tensor& x, bool& flag, int64_t& step) {
      auto dense = [&](const at::Tensor& y) {
        return (y.size(cols) == 1 || y.stride(cols) == 1) &&
               (y.size(rows) == 1 || y.stride(rows) == y.size(cols));
      };
      const bool usable = dense(x) || dense(x.transpose(rows, cols));
      if (!usable) x = x.contiguous();
      if (!dense(x)) {
        x = x.transpose(rows, cols);
        flag = !flag;
      }
      step = rank == 3 && x.size(0) > 1 ? x.stride(0) : 0;
    };
    int64_t step_a = 0, step_b = 0;
    row_major(a, fa, step_a);
    row_major(b, fb, step_b);
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
    // Every task's op(A) row-major and right after the previous one, times
    // one shared B (the meta-parameters at the first inner step): the
    // tasks' rows are one tall matrix, and the products one GEMM of
    // batch * m rows instead of `batch` small ones.
    int64_t rows_a = m, products = batch;
    if (batch > 1 && step_b == 0 && !fa && step_a == m * k) {
      rows_a = m * batch;
      products = 1;
    }
    const GemmShape shape{a.scalar_type() == at::kDouble, fa, fb, rows_a, n, k};
    GemmKernel kernel;
    {
      std::lock_guard<std::mutex> lock(memo->mutex);
      if (!memo->valid || !SameShape(memo->shape, shape)) {
        memo->kernel = ChooseGemmKernel(shape, blas.library, [&](GemmKernel candidate) {
          return a.scalar_type() == at::kFloat
                     ? TimeOneProduct<float>(candidate, blas, fa, fb, rows_a, n, k,
                                             a.data_ptr<float>(), b.data_ptr<float>())
                     : TimeOneProduct<double>(candidate, blas, fa, fb, rows_a, n, k,
                                              a.data_ptr<double>(), b.data_ptr<double>());
        });
        memo->shape = shape;
        memo->valid = true;
      }
      kernel = memo->kernel;
    }
    if (kernel == GemmKernel::kSmall) {
      // The tasks of a batched product split over ATen's threads when the
      // product has at least ~1M multiply-adds, in chunks of at least
      // ~256k: below that a fork-join costs more than it saves (the
      // sinusoid's 25 x 10x40x40 products ran slower at 2 threads split).
      const int64_t work = std::max<int64_t>(1, rows_a * n * k);
      const int64_t grain = products * work < (int64_t{1} << 20)
                                ? products
                                : std::max<int64_t>(1, (int64_t{1} << 18) / work);
      at::parallel_for(0, products, grain, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          if (a.scalar_type() == at::kFloat) {
            SmallGemm(fa, fb, rows_a, n, k, a.data_ptr<float>() + i * step_a,
                      b.data_ptr<float>() + i * step_b, static_cast<float>(beta),
                      c.data_ptr<float>() + i * rows_a * n);
          } else {
            SmallGemm(fa, fb, rows_a, n, k, a.data_ptr<double>() + i * step_a,
                      b.data_ptr<double>() + i * step_b, beta,
                      c.data_ptr<double>() + i * rows_a * n);
          }
        }
      });
      stack.back() = std::move(c);
      return;
    }
    // One GEMM per task, one after another: the BLAS LibTorch loads here
    // (Debian's serial OpenBLAS) shares its work buffers between calls, so
    // concurrent calls from several threads corrupt each other's results.
    // Programs on other threads (metafuse.vmap's parallel strategies) wait.
    std::lock_guard<std::mutex> lock(BlasMutex());
    for (int64_t i = 0; i < products; ++i) {
      if (a.scalar_type() == at::kFloat) {
        RowMajorGemm<float>(blas.sgemm, fa, fb, rows_a, n, k, a.data_ptr<float>() + i * step_a,
                            b.data_ptr<float>() + i * step_b, static_cast<float>(beta),
                            c.data_ptr<float>() + i * rows_a * n);
      } else {
        RowMajorGemm<double>(blas.dgemm, fa, fb, rows_a, n, k, a.data_ptr<double>() + i * step_a,
                             b.data_ptr<double>() + i * step_b, beta,
                             c.data_ptr<double>() + i * rows_a * n);
      }
    }
    stack.back() = std::move(c);
  };
}

}  // namespace metafuse::runtime
