#include "runtime/gemm_choice.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "runtime/fused_kernel_launch.h"
#include "runtime/kernel_cache.h"
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

// Read once per process: every new shape names the choices file.
const std::string& CpuModel() {
  static const std::string model = [] {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("model name", 0) == 0) {
        const size_t colon = line.find(':');
        return colon == std::string::npos ? line : line.substr(colon + 1);
      }
    }
    return std::string("unknown cpu");
  }();
  return model;
}

// FNV-1a, enough to name a file after the machine's identity.
uint64_t Hash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::mutex table_mutex;
// Keyed by the BLAS library and the shape's text (GemmShape::Key, the form
// the file keeps).
std::map<std::string, GemmKernel>& Table() {
  static auto* table = new std::map<std::string, GemmKernel>();
  return *table;
}

// Lines "<shape key> <blas|small> <blas seconds> <small seconds>"; the
// first line for a shape wins (a later one can only come from a process
// that measured before it saw the file, which the lock prevents).
void ReadChoices(int fd, const std::string& prefix, std::map<std::string, GemmKernel>* into) {
  std::string data;
  char buffer[4096];
  lseek(fd, 0, SEEK_SET);
  for (ssize_t got; (got = read(fd, buffer, sizeof buffer)) > 0;) data.append(buffer, got);
  std::istringstream lines(data);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string dtype, ta, tb, m, n, k, kernel;
    if (!(fields >> dtype >> ta >> tb >> m >> n >> k >> kernel)) continue;
    if (kernel != "blas" && kernel != "small") continue;
    const std::string key =
        absl::StrCat(prefix, dtype, " ", ta, " ", tb, " ", m, " ", n, " ", k);
    into->emplace(key, kernel == "small" ? GemmKernel::kSmall : GemmKernel::kBlas);
  }
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

std::string GemmChoiceFile(const std::string& blas_library) {
  KernelCache* cache = ProcessKernelCache();
  if (cache == nullptr) return "";
  const std::string identity =
      absl::StrCat(CpuModel(), "|", SmallGemmIsa(), "|", blas_library);
  char name[64];
  std::snprintf(name, sizeof name, "/gemm_choices-%016llx.txt",
                static_cast<unsigned long long>(Hash(identity)));
  return cache->directory() + name;
}

GemmKernel ChooseGemmKernel(const GemmShape& shape, const std::string& blas_library,
                            const GemmTimer& time) {
  if (!PreferSmallGemm(shape.m, shape.n, shape.k)) return GemmKernel::kBlas;
  const Policy policy = PolicyFromEnvironment();
  if (policy == Policy::kAlways) return GemmKernel::kSmall;
  if (policy == Policy::kNever) return GemmKernel::kBlas;
  const std::string prefix = blas_library + "|";
  const std::string key = prefix + shape.Key();
  std::lock_guard<std::mutex> lock(table_mutex);
  auto& table = Table();
  if (auto it = table.find(key); it != table.end()) return it->second;
  const std::string path = GemmChoiceFile(blas_library);
  const int fd = path.empty() ? -1 : open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  // Measured and written under the lock: a second process waits, then
  // reads this one's choice instead of making its own.
  if (fd >= 0 && flock(fd, LOCK_EX) == 0) {
    ReadChoices(fd, prefix, &table);
    if (auto it = table.find(key); it != table.end()) {
      flock(fd, LOCK_UN);
      close(fd);
      return it->second;
    }
  }
  double blas_s = 0, small_s = 0;
  const GemmKernel chosen = Measure(time, &blas_s, &small_s);
  table.emplace(key, chosen);
  if (fd >= 0) {
    const std::string line =
        absl::StrCat(shape.Key(), " ", chosen == GemmKernel::kSmall ? "small" : "blas", " ", blas_s,
                     " ", small_s, "\n");
    lseek(fd, 0, SEEK_END);
    // A short write leaves a partial last line, which ReadChoices skips.
    [[maybe_unused]] const ssize_t written = write(fd, line.data(), line.size());
    flock(fd, LOCK_UN);
    close(fd);
  }
  return chosen;
}

void ClearGemmChoicesForTesting() {
  std::lock_guard<std::mutex> lock(table_mutex);
  Table().clear();
}

}  // namespace metafuse::runtime
