// The container of ahead-of-time artifacts (metafuse.aot): a zip archive of
// stored (uncompressed) members, as Python's zipfile writes it with
// ZIP_STORED, read without Python and without a zip library; and SHA-256,
// the checksum the manifest records for each member.
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace metafuse::runtime {

// Every member of the archive at `path`, by name. Refuses (with what failed)
// a missing file, a truncated or foreign file, compressed or encrypted
// members, members that overlap or reach past the end, and duplicate names.
absl::StatusOr<std::map<std::string, std::string>> ReadStoredZip(const std::string& path);

// The same for the bytes of an archive already read (`path` names it in
// errors): a caller that checks a signature over the file reads it once.
absl::StatusOr<std::map<std::string, std::string>> ParseStoredZip(const std::string& bytes,
                                                                  const std::string& path);

// Lower-case hexadecimal SHA-256 of `data`.
std::string Sha256Hex(const std::string& data);

}  // namespace metafuse::runtime
