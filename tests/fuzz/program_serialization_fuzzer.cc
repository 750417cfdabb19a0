// A serialized compiled program (an artifact's program.bin, what the
// scheduler ships to workers): DeserializeProgram refuses with an error, or
// returns a program whose every index is in range and which serializes and
// reads back to the same dump.
#include <cstdint>
#include <string>

#include "runtime/program_value/program_serialization.h"
#include "tests/fuzz/fuzz_check.h"

namespace rt = metafuse::runtime;

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
