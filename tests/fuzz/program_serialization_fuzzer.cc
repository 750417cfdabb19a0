// A serialized compiled program (an artifact's program.bin, what the
// scheduler ships to workers): DeserializeProgram refuses with an error, or
// returns a program which serializes and reads back to the same dump.
//
// The bytes are a zip whose members carry CRC-32s, checked before LibTorch
// reads them; most mutations would stop there. A custom mutator therefore
// rewrites the directory's CRC-32s after each mutation, so that damaged
// pickles and damaged program fields reach the unpickler and the reader.
#include <zlib.h>

#include <cstdint>
#include <string>

#include "runtime/program_value/program_serialization.h"
#include "tests/fuzz/fuzz_check.h"

namespace rt = metafuse::runtime;

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace {

uint32_t Le(const uint8_t* p, int bytes) {
  uint32_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

// Sets every directory entry's CRC-32 to that of its member's bytes, where
// the directory and the member lie inside `data` (else leaves it alone).
void RefreshCrcs(uint8_t* data, size_t size) {
  if (size < 22 || Le(data + size - 22, 4) != 0x06054b50u) return;
  const size_t end = size - 22;
  size_t at = Le(data + end + 16, 4);
  for (uint32_t k = 0, count = Le(data + end + 10, 2); k < count; ++k) {
    if (at > end || end - at < 46 || Le(data + at, 4) != 0x02014b50u) return;
    const size_t stored = Le(data + at + 20, 4), local = Le(data + at + 42, 4);
    if (local > end || end - local < 30) return;
    const size_t start = local + 30 + Le(data + local + 26, 2) + Le(data + local + 28, 2);
    if (start <= end && stored <= end - start) {
      const uint32_t crc = crc32(0, data + start, stored);
      for (int i = 0; i < 4; ++i) data[at + 16 + i] = static_cast<uint8_t>(crc >> (8 * i));
    }
    at += 46 + Le(data + at + 28, 2) + Le(data + at + 30, 2) + Le(data + at + 32, 2);
  }
}

}  // namespace

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size,
                                          unsigned int /*seed*/) {
  size = LLVMFuzzerMutate(data, size, max_size);
  RefreshCrcs(data, size);
  return size;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<rt::CompiledProgram> program = rt::DeserializeProgram(bytes);
  if (metafuse::fuzz::Refused(program)) return 0;
  const std::string dump = rt::Dump(*program);
  absl::StatusOr<rt::CompiledProgram> again = rt::DeserializeProgram(rt::SerializeProgram(*program));
  FUZZ_CHECK(again.ok(), "an accepted program serializes and reads back");
  FUZZ_CHECK(rt::Dump(*again) == dump, "the program survives the round trip");
  return 0;
}
