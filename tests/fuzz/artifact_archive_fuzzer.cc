// The container of ahead-of-time artifacts: ReadStoredZip refuses with an
// error, or returns members that lie inside the file, stored (a member's
// bytes appear verbatim in the archive).
#include <cstdint>
#include <string>

#include "runtime/program_value/artifact_archive.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = metafuse::fuzz::ScratchDirectory() + "/input.mfa";
  metafuse::fuzz::WriteFile(path, data, size);
  auto members = metafuse::runtime::ReadStoredZip(path);
  if (metafuse::fuzz::Refused(members)) return 0;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  for (const auto& [name, contents] : *members) {
    FUZZ_CHECK(contents.size() <= size, "a member fits in the archive");
    FUZZ_CHECK(contents.empty() || bytes.find(contents) != std::string::npos,
               "a stored member's bytes are in the archive");
    (void)metafuse::runtime::Sha256Hex(contents);
  }
  return 0;
}
