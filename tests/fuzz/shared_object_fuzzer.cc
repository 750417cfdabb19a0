// The ELF checks made before shared-object bytes (an artifact member, a
// kernel-cache entry) reach the dynamic loader: CheckSharedObjectBytes
// refuses with an error, or every header and segment it accepted lies
// inside the bytes. The loader itself is not fuzzed: it trusts its input
// by design, and the bytes it gets are checksummed first.
#include <elf.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "runtime/jit/shared_object.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  absl::Status checked = metafuse::runtime::CheckSharedObjectBytes(bytes);
  if (metafuse::fuzz::Refused(checked)) return 0;
  // Accepted: re-derive the extent independently of the check.
  Elf64_Ehdr eh;
  FUZZ_CHECK(size >= sizeof eh, "the ELF header is inside");
  std::memcpy(&eh, data, sizeof eh);
  FUZZ_CHECK(eh.e_phoff + uint64_t{eh.e_phnum} * sizeof(Elf64_Phdr) <= size,
             "the program headers are inside");
  for (int i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph;
    std::memcpy(&ph, data + eh.e_phoff + i * sizeof ph, sizeof ph);
    FUZZ_CHECK(ph.p_offset <= size && ph.p_filesz <= size - ph.p_offset,
               "every segment is inside");
  }
  return 0;
}
