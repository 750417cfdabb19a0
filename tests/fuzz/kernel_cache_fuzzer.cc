// A kernel-cache entry read from disk: Lookup treats a damaged entry as a
// miss (and removes it), or returns the artifact of an entry that is
// exactly what Store writes for that key and artifact.
//
// The key is taken from the entry itself when its key field parses (the
// three length-prefixed parts of KernelKey::Serialize), so that mutated
// entries get past the key comparison to the lengths and the checksum.
#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "runtime/base/kernel_cache.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/fuzz_file.h"

namespace {

using metafuse::runtime::KernelCache;
using metafuse::runtime::KernelKey;

bool TakeU64(const std::string& in, size_t& pos, uint64_t& v) {
  if (in.size() < 8 || pos > in.size() - 8) return false;
  v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{static_cast<unsigned char>(in[pos + i])} << (8 * i);
  pos += 8;
  return true;
}

bool TakePart(const std::string& in, size_t& pos, std::string& out) {
  uint64_t n = 0;
  if (!TakeU64(in, pos, n) || n > in.size() - pos) return false;
  out = in.substr(pos, n);
  pos += n;
  return true;
}

// The key an entry names: magic (6 bytes), the key's length, then its parts.
KernelKey KeyOf(const std::string& entry) {
  KernelKey key{"fuzz", "target", "versions"};
  size_t pos = 6;
  uint64_t key_length = 0;
  if (entry.size() < pos || !TakeU64(entry, pos, key_length)) return key;
  KernelKey named;
  if (TakePart(entry, pos, named.ir) && TakePart(entry, pos, named.target) &&
      TakePart(entry, pos, named.versions)) {
    return named;
  }
  return key;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string entry(reinterpret_cast<const char*>(data), size);
  // A fresh cache each time: the in-memory map must not answer for the disk.
  auto cache = KernelCache::Open(metafuse::fuzz::ScratchDirectory() + "/kernels");
  FUZZ_CHECK(cache.ok(), "the scratch cache opens");
  const KernelKey key = KeyOf(entry);
  const std::string path = (*cache)->PathFor(key);
  metafuse::fuzz::WriteFile(path, data, size);
  std::optional<std::string> artifact = (*cache)->Lookup(key);
  if (!artifact) {
    FUZZ_CHECK(!std::ifstream(path).good(), "a damaged entry is removed");
    FUZZ_CHECK((*cache)->stats().corrupted == 1, "a damaged entry is counted");
    return 0;
  }
  FUZZ_CHECK(artifact->size() <= size, "the artifact fits in its entry");
  // Accepted: storing the same artifact under the same key writes the same bytes.
  FUZZ_CHECK((*cache)->Store(key, *artifact).ok(), "the artifact stores again");
  FUZZ_CHECK(ReadAll(path) == entry, "an accepted entry is what Store writes");
  return 0;
}
