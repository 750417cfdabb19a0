// Serialized TreeSpecs (artifacts, caches): DeserializeTreeSpec refuses
// with an error, or returns a spec that serializes and reads back equal.
#include <cstdint>
#include <string>

#include "tests/fuzz/fuzz_check.h"
#include "tree/serialization.h"

namespace tree = metafuse::tree;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<tree::TreeSpecPtr> spec = tree::DeserializeTreeSpec(text);
  if (metafuse::fuzz::Refused(spec)) return 0;
  (void)(*spec)->ToString();
  absl::StatusOr<std::string> written = tree::SerializeTreeSpec(**spec);
  FUZZ_CHECK(written.ok(), "an accepted spec serializes");
  absl::StatusOr<tree::TreeSpecPtr> again = tree::DeserializeTreeSpec(*written);
  FUZZ_CHECK(again.ok(), "a serialized spec reads back");
  FUZZ_CHECK(**again == **spec, "the spec survives the round trip");
  return 0;
}
