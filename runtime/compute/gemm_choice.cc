#include "runtime/compute/gemm_choice.h"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "runtime/tuning/measured_choice.h"
#include "runtime/compute/small_gemm.h"

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

}  // namespace

std::string GemmShape::Key() const {
  return absl::StrCat(f64 ? "f64" : "f32", " ", trans_a ? 1 : 0, " ", trans_b ? 1 : 0, " ", m,
                      " ", n, " ", k);
}

namespace {

// The revision of runtime/compute/small_gemm's kernels: a choice timed against
// older kernels is not reused (2: AVX-512 reads B in place; 3: timed by the
// tuning library's rule, runtime/tuning/timing_rule.h).
constexpr int kSmallGemmRevision = 3;

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
  if (policy != Policy::kAuto) {
    const bool small = policy == Policy::kAlways;
    RecordChoice({"gemm_choices", shape.Key(), small ? "small" : "blas", ChoiceSource::kSetting,
                  small ? "METAFUSE_SMALL_GEMM=always" : "METAFUSE_SMALL_GEMM=never"});
    return small ? GemmKernel::kSmall : GemmKernel::kBlas;
  }
  const std::string chosen =
      ChooseMeasured("gemm_choices", Identity(blas_library), shape.Key(), [&](std::string* note) {
        // The BLAS is the default: the micro-kernels must beat it by the
        // rule's margin.
        const Timing timing =
            TimeCandidates({{"blas", nullptr, [&] { return time(GemmKernel::kBlas); }},
                            {"small", nullptr, [&] { return time(GemmKernel::kSmall); }}});
        *note = timing.note;
        return std::string(timing.winner == 1 ? "small" : "blas");
      });
  return chosen == "small" ? GemmKernel::kSmall : GemmKernel::kBlas;
}

void ClearGemmChoicesForTesting() { ClearMeasuredChoicesForTesting(); }

}  // namespace metafuse::runtime
