// What every harness shares: a failed property aborts with its reason, so
// that libFuzzer records the input as a crash (a refusal is not a failure;
// accepting bytes that do not round-trip is).
#pragma once

#include <cstdio>
#include <cstdlib>

#include "absl/status/statusor.h"

#define FUZZ_CHECK(condition, what)                                        \
  do {                                                                     \
    if (!(condition)) {                                                    \
      std::fprintf(stderr, "fuzz property failed: %s (%s)\n", what, #condition); \
      std::abort();                                                        \
    }                                                                      \
  } while (0)

namespace metafuse::fuzz {

// True when the loader refused; a refusal must say what is wrong.
// METAFUSE_FUZZ_VERBOSE=1 prints each refusal (to see what one input hit).
inline bool Refused(const absl::Status& status) {
  if (status.ok()) return false;
  FUZZ_CHECK(!status.message().empty(), "a refusal names what is wrong");
  static const bool verbose = std::getenv("METAFUSE_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "refused: %s\n", status.ToString().c_str());
  return true;
}
template <typename T>
bool Refused(const absl::StatusOr<T>& result) {
  return Refused(result.status());
}

}  // namespace metafuse::fuzz
