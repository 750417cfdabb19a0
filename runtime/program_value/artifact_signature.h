// Signing ahead-of-time artifacts: an HMAC-SHA256 over the whole artifact
// file with a key the user holds, so that a loading process runs the
// artifact's native code (LLVM object code, C++ shared objects) only when
// it was signed with that key (docs/aot.md, "Trust").
//
// The signature record is the zip archive's comment, the last bytes of the
// file: "metafuse-signature hmac-sha256 " and 64 hexadecimal digits. The MAC
// covers every byte before the record (the members, the directory and the
// end-of-directory record, whose comment length counts the record), so any
// change to the file, or a record moved onto another file, fails to verify.
//
// Keys are at least 16 bytes, written as hexadecimal text wherever they are
// text (the METAFUSE_ARTIFACT_KEY variable, a key file, a Python str).
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace metafuse::runtime {

// The environment variable a key is read from when none is given: hex.
inline constexpr char kArtifactKeyVariable[] = "METAFUSE_ARTIFACT_KEY";
inline constexpr size_t kMinArtifactKeyBytes = 16;

// HMAC-SHA256 (RFC 2104, FIPS 180-4) of `data` under `key`: 32 raw bytes.
std::string HmacSha256(const std::string& key, const std::string& data);

// The key that `text` (hexadecimal, surrounding whitespace ignored) writes;
// an error names `source` and says what a key must be.
absl::StatusOr<std::string> ParseArtifactKey(const std::string& text, const std::string& source);

// A raw key checked for length; the error names `source`.
absl::Status CheckArtifactKey(const std::string& key, const std::string& source);

// The key in the file at `path` (hex text).
absl::StatusOr<std::string> ReadArtifactKeyFile(const std::string& path);

// The key METAFUSE_ARTIFACT_KEY holds, nullopt when it is unset or empty.
absl::StatusOr<std::optional<std::string>> ArtifactKeyFromEnvironment();

// A name for a key that does not reveal it: the first 16 hex digits of its
// SHA-256.
std::string ArtifactKeyFingerprint(const std::string& key);

// `zip` (a zip file without an archive comment, as Python's zipfile writes
// it) with its signature record under `key` appended.
absl::StatusOr<std::string> SignArtifact(const std::string& zip, const std::string& key);

enum class ArtifactSignature {
  kUnsigned,     // no signature record
  kNotVerified,  // signed, and no key was given to check it
  kVerified,     // signed with the key given (checked in constant time)
};

// What the signature of the artifact file `bytes` says, checked with `key`
// when one is given (nullptr: none). A record that does not verify with the
// key is PermissionDenied naming the key's fingerprint: the file was changed
// after signing or signed with another key.
absl::StatusOr<ArtifactSignature> CheckArtifactSignature(const std::string& bytes,
                                                         const std::string* key);

// "unsigned", "signed (HMAC-SHA256), not verified (no key)", "signed
// (HMAC-SHA256), verified with key <fingerprint>".
std::string DescribeArtifactSignature(ArtifactSignature signature, const std::string* key);

}  // namespace metafuse::runtime
