#include "runtime/gemm_choice.h"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "runtime/measured_choice.h"
#include "runtime/small_gemm.h"

namespace metafuse::runtime {
namespace {

enum class Policy { kAuto, kAlways, kNever };

Policy PolicyFromEnvironment() {
  const char* v = std::getenv("METAFUSE_SMALL_GEMM");
  const std::string value = v == nullptr ? "" : v;
  if (value.empty() || value == "auto") return Policy::kAuto;
  if (value == "always") return Policy::kAlways;
  if (value == "never") return Policy::kNever;
  throw std::invalid_argument("METAFUSE_SMALL_GEMM must be auto, always or never, got '" +
                              value + "'");
}

GemmKernel Measure(const GemmTimer& time, double* blas_s, double* small_s) {
  // Alternating, so a burst of load hits both; the best of three each.
  *blas_s = *small_s = 1e30;
  for (int round = 0; round < 3; ++round) {
    *blas_s = std::min(*blas_s, time(GemmKernel::kBlas));
    *small_s = std::min(*small_s, time(GemmKernel::kSmall));
  }
  return *small_s < *blas_s ? GemmKernel::kSmall : GemmKernel::kBlas;
}

}  // namespace

std::string GemmShape::Key() const {
  return absl::StrCat(f64 ? "f64" : "f32", " ", trans_a ? 1 : 0, " ", trans_b ? 1 : 0, " ", m,
                      " ", n, " ", k);
}

namespace {

// The revision of runtime/small_gemm's kernels: a choice timed against
// older kernels is not reused (2: AVX-512 reads B in place).
constexpr int kSmallGemmRevision = 2;

// The machine identity of a choices file: CPU, micro-kernel ISA and
// revision, BLAS.
std::string Identity(const std::string& blas_library) {
  return absl::StrCat(CpuModel(), "|", SmallGemmIsa(), " r", kSmallGemmRevision, "|",
                      blas_library);
}

}  // namespace

std::string GemmChoiceFile(const std::string& blas_library) {
  return MeasuredChoiceFile("gemm_choices", Identity(blas_library));
}

GemmKernel ChooseGemmKernel(const GemmShape& shape, const std::string& blas_library,
                            const GemmTimer& time) {
  if (!PreferSmallGemm(shape.m, shape.n, shape.k)) return GemmKernel::kBlas;
  const Policy policy = PolicyFromEnvironment();
  if (policy == Policy::kAlways) return GemmKernel::kSmall;
  if (policy == Policy::kNever) return GemmKernel::kBlas;
  const std::string chosen =
      ChooseMeasured("gemm_choices", Identity(blas_library), shape.Key(), [&](std::string* note) {
        double blas_s = 0, small_s = 0;
        const GemmKernel kernel = Measure(time, &blas_s, &small_s);
        *note = absl::StrCat("blas ", blas_s, " s, small ", small_s, " s");
        return std::string(kernel == GemmKernel::kSmall ? "small" : "blas");
      });
  return chosen == "small" ? GemmKernel::kSmall : GemmKernel::kBlas;
}

void ClearGemmChoicesForTesting() { ClearMeasuredChoicesForTesting(); }

}  // namespace metafuse::runtime
