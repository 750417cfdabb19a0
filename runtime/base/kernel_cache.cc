#include "runtime/base/kernel_cache.h"

#include "runtime/base/options.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/str_cat.h"
#include <c10/util/Exception.h>

namespace metafuse::runtime {
namespace {

constexpr char kMagic[] = "MFKC1\n";

// FNV-1a, 64-bit: for file names and the integrity checksum (not security:
// the directory is private to the user).
uint64_t Fnv1a(const std::string& data, uint64_t seed = 1469598103934665603ULL) {
  uint64_t h = seed;
  for (unsigned char c : data) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

std::string Hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

void AppendU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

bool ReadU64(const std::string& in, size_t& pos, uint64_t& v) {
  if (pos + 8 > in.size()) return false;
  v = 0;
  for (int i = 0; i < 8; ++i) {
    v |= static_cast<uint64_t>(static_cast<unsigned char>(in[pos + i])) << (8 * i);
  }
  pos += 8;
  return true;
}

// magic | len(key) key | len(artifact) artifact | fnv(all before)
std::string Encode(const std::string& key, const std::string& artifact) {
  std::string out(kMagic);
  AppendU64(out, key.size());
  out += key;
  AppendU64(out, artifact.size());
  out += artifact;
  AppendU64(out, Fnv1a(out));
  return out;
}

std::optional<std::string> Decode(const std::string& data, const std::string& key) {
  const size_t magic_len = sizeof(kMagic) - 1;
  if (data.size() < magic_len || data.compare(0, magic_len, kMagic) != 0) return {};
  size_t pos = magic_len;
  uint64_t key_len = 0, artifact_len = 0, checksum = 0;
  if (!ReadU64(data, pos, key_len) || pos + key_len > data.size()) return {};
  if (data.compare(pos, key_len, key) != 0 || key_len != key.size()) return {};
  pos += key_len;
  if (!ReadU64(data, pos, artifact_len) || pos + artifact_len > data.size()) return {};
  std::string artifact = data.substr(pos, artifact_len);
  pos += artifact_len;
  const size_t body_end = pos;
  if (!ReadU64(data, pos, checksum) || pos != data.size()) return {};
  if (checksum != Fnv1a(data.substr(0, body_end))) return {};
  return artifact;
}

absl::Status MakePrivateDirectory(const std::string& dir) {
  // Create each missing component; only the last one must be private.
  for (size_t i = 1; i <= dir.size(); ++i) {
    if (i == dir.size() || dir[i] == '/') {
      const std::string part = dir.substr(0, i);
      if (mkdir(part.c_str(), i == dir.size() ? 0700 : 0755) != 0 && errno != EEXIST) {
        return absl::PermissionDeniedError(absl::StrCat(
            "kernel cache: cannot create ", part, ": ", std::strerror(errno)));
      }
    }
  }
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("kernel cache: ", dir, " is not a directory"));
  }
  if (st.st_uid != getuid()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "kernel cache: ", dir, " belongs to another user; refusing to load "
        "code from it"));
  }
  if ((st.st_mode & 0077) != 0 && chmod(dir.c_str(), 0700) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        "kernel cache: ", dir, " is accessible to others and cannot be made "
        "private: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

std::string KernelKey::Serialize() const {
  std::string out;
  for (const std::string* part : {&ir, &target, &versions}) {
    AppendU64(out, part->size());
    out += *part;
  }
  return out;
}

std::string DefaultKernelCacheDirectory() {
  const std::string configured = OptionsFromEnvironment().kernel_cache_dir;
  if (!configured.empty()) return configured;
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && xdg[0] == '/') return absl::StrCat(xdg, "/metafuse/kernels");
  const char* home = std::getenv("HOME");
  return absl::StrCat(home ? home : "/tmp", "/.cache/metafuse/kernels");
}

absl::StatusOr<std::unique_ptr<KernelCache>> KernelCache::Open(const std::string& dir) {
  std::string path = dir.empty() ? DefaultKernelCacheDirectory() : dir;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  if (path.empty() || path[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel cache: the directory must be an absolute path, got '", path, "'"));
  }
  absl::Status made = MakePrivateDirectory(path);
  if (!made.ok()) return made;
  return std::unique_ptr<KernelCache>(new KernelCache(path));
}

std::string KernelCache::PathFor(const KernelKey& key) const {
  const std::string k = key.Serialize();
  // Two differently seeded 64-bit hashes: 128 bits of file name.
  return absl::StrCat(dir_, "/", Hex(Fnv1a(k)), Hex(Fnv1a(k, 0x9e3779b97f4a7c15ULL)),
                      ".kernel");
}

std::optional<std::string> KernelCache::Lookup(const KernelKey& key) {
  const std::string k = key.Serialize();
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = memory_.find(k);
    if (it != memory_.end()) {
      ++stats_.memory_hits;
      return it->second;
    }
  }
  const std::string path = PathFor(key);
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.misses;
    return {};
  }
  std::ostringstream buffer;
  buffer << in.rdbuf();
  std::optional<std::string> artifact = Decode(buffer.str(), k);
  std::lock_guard<std::mutex> lock(mu_);
  if (!artifact) {
    // Corrupted, truncated, or another key's entry under a colliding name:
    // never loaded; removed so that it is rebuilt.
    ++stats_.corrupted;
    ++stats_.misses;
    std::remove(path.c_str());
    return {};
  }
  ++stats_.disk_hits;
  memory_[k] = *artifact;
  return artifact;
}

absl::Status KernelCache::Store(const KernelKey& key, const std::string& artifact) {
  const std::string k = key.Serialize();
  const std::string path = PathFor(key);
  static std::atomic<uint64_t> counter{0};
  std::random_device rd;
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid(), ".", counter++, ".", rd());
  const std::string data = Encode(k, artifact);
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("kernel cache: cannot write ", tmp, ": ",
                                            std::strerror(errno)));
  }
  size_t written = 0;
  while (written < data.size()) {
    ssize_t n = write(fd, data.data() + written, data.size() - written);
    if (n <= 0) {
      close(fd);
      unlink(tmp.c_str());
      return absl::InternalError(absl::StrCat("kernel cache: write to ", tmp,
                                              " failed: ", std::strerror(errno)));
    }
    written += static_cast<size_t>(n);
  }
  fsync(fd);
  close(fd);
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    unlink(tmp.c_str());
    return absl::InternalError(absl::StrCat("kernel cache: cannot install ", path,
                                            ": ", std::strerror(errno)));
  }
  std::lock_guard<std::mutex> lock(mu_);
  memory_[k] = artifact;
  return absl::OkStatus();
}

absl::StatusOr<std::string> KernelCache::GetOrBuild(
    const KernelKey& key, const std::function<absl::StatusOr<std::string>()>& build,
    bool* built) {
  if (built) *built = false;
  if (auto hit = Lookup(key)) return *hit;
  absl::StatusOr<std::string> artifact = build();
  if (!artifact.ok()) return artifact.status();
  if (built) *built = true;
  absl::Status stored = Store(key, *artifact);
  if (!stored.ok()) return stored;
  return artifact;
}

KernelCache::Stats KernelCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

KernelCache* ProcessKernelCache() {
  static KernelCache* cache = [] {
    auto opened = KernelCache::Open();
    if (!opened.ok()) {
      TORCH_WARN("metafuse: kernel cache unavailable (", opened.status().ToString(),
                 "); compiling kernels without it");
      return static_cast<KernelCache*>(nullptr);
    }
    return opened->release();
  }();
  return cache;
}

}  // namespace metafuse::runtime
