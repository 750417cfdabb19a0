// A cache of compiled kernels, in memory and on disk.
//
// Entries are keyed by the kernel IR, the target (CPU features, GPU
// architecture) and the versions of everything that shaped the code; the
// file name is a hash of the key, and the full key is stored in the entry and
// compared on load, so a hash collision is a miss, never a wrong kernel.
//
// On disk: one file per entry under a per-user directory with mode 0700
// ($XDG_CACHE_HOME/metafuse/kernels or ~/.cache/metafuse/kernels). Writes go
// to a unique temporary file, are flushed and renamed into place, so a reader
// sees a complete entry or none, and processes that compile the same kernel
// at once do not corrupt it. Every load checks the magic, the lengths, the
// key and a checksum; a corrupted or truncated entry is removed and reported
// as a miss (the caller rebuilds it).
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "absl/status/statusor.h"

namespace metafuse::runtime {

struct KernelKey {
  std::string ir;        // the kernel IR (or source) that was compiled
  std::string target;    // e.g. "x86_64 avx2,fma" or "sm_90"
  std::string versions;  // e.g. "metafuse 0.1 / llvm 14.0.6"
  std::string Serialize() const;
};

class KernelCache {
 public:
  // Opens (creating if needed) the cache directory `dir`; empty: the default
  // per-user location. Fails if the directory is not owned by this user or
  // is writable by others.
  static absl::StatusOr<std::unique_ptr<KernelCache>> Open(const std::string& dir = "");

  // The cached artifact, or nullopt on a miss (including a corrupted entry,
  // which is removed).
  std::optional<std::string> Lookup(const KernelKey& key);

  // Stores `artifact` atomically (memory and disk).
  absl::Status Store(const KernelKey& key, const std::string& artifact);

  // Lookup, else build + Store. `built` (if given) says whether it built.
  absl::StatusOr<std::string> GetOrBuild(
      const KernelKey& key, const std::function<absl::StatusOr<std::string>()>& build,
      bool* built = nullptr);

  const std::string& directory() const { return dir_; }
  std::string PathFor(const KernelKey& key) const;

  struct Stats {
    int64_t memory_hits = 0, disk_hits = 0, misses = 0, corrupted = 0;
  };
  Stats stats() const;

 private:
  explicit KernelCache(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::string> memory_;  // serialized key -> artifact
  Stats stats_;
};

// Default directory: $XDG_CACHE_HOME/metafuse/kernels, else
// $HOME/.cache/metafuse/kernels.
std::string DefaultKernelCacheDirectory();

// The process's on-disk cache in the default directory, opened on first use
// (null, after one warning, when the directory is unusable: compiling
// without it is correct, only slower to start).
KernelCache* ProcessKernelCache();

}  // namespace metafuse::runtime
