#include "runtime/program_value/artifact_signature.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace metafuse::runtime {
namespace {

constexpr char kRecordPrefix[] = "metafuse-signature hmac-sha256 ";
constexpr size_t kPrefixSize = sizeof(kRecordPrefix) - 1;
constexpr size_t kMacHexSize = 64;
constexpr size_t kRecordSize = kPrefixSize + kMacHexSize;
// The zip end-of-directory record: its signature, size, and where its
// comment length is.
constexpr uint32_t kEndOfDirectory = 0x06054b50;
constexpr size_t kEndOfDirectorySize = 22, kCommentLengthAt = 20;

std::string Hex(const std::string& raw) {
  std::string hex;
  for (unsigned char c : raw) absl::StrAppendFormat(&hex, "%02x", c);
  return hex;
}

uint32_t U32(const std::string& b, size_t at) {
  uint32_t v = 0;
  for (size_t i = 4; i-- > 0;) v = v << 8 | static_cast<uint8_t>(b[at + i]);
  return v;
}

uint32_t U16(const std::string& b, size_t at) {
  return static_cast<uint8_t>(b[at]) | static_cast<uint8_t>(b[at + 1]) << 8;
}

std::string KeyRule() {
  return absl::StrCat("a key is at least ", kMinArtifactKeyBytes,
                      " bytes written as hexadecimal digits (e.g. python3 -c \"import secrets; "
                      "print(secrets.token_hex(32))\")");
}

}  // namespace

std::string HmacSha256(const std::string& key, const std::string& data) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), mac, &length);
  return std::string(reinterpret_cast<const char*>(mac), length);
}

absl::Status CheckArtifactKey(const std::string& key, const std::string& source) {
  if (key.size() < kMinArtifactKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": the key has ", key.size(),
                                                   " bytes; ", KeyRule()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ParseArtifactKey(const std::string& text, const std::string& source) {
  const std::string hex(absl::StripAsciiWhitespace(text));
  if (hex.size() % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": the key has an odd number (", hex.size(), ") of hexadecimal digits; ",
        KeyRule()));
  }
  std::string key;
  for (size_t i = 0; i < hex.size(); i += 2) {
    int byte = 0;
    for (size_t j = i; j < i + 2; ++j) {
      const char c = absl::ascii_tolower(hex[j]);
      if (!absl::ascii_isxdigit(c)) {
        return absl::InvalidArgumentError(absl::StrCat(
            source, ": the key holds a character that is not a hexadecimal digit (at ", j,
            "); ", KeyRule()));
      }
      byte = byte * 16 + (absl::ascii_isdigit(c) ? c - '0' : c - 'a' + 10);
    }
    key.push_back(static_cast<char>(byte));
  }
  if (absl::Status s = CheckArtifactKey(key, source); !s.ok()) return s;
  return key;
}

absl::StatusOr<std::string> ReadArtifactKeyFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("key file ", path, ": cannot open it"));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return ParseArtifactKey(text, absl::StrCat("key file ", path));
}

absl::StatusOr<std::optional<std::string>> ArtifactKeyFromEnvironment() {
  const char* value = std::getenv(kArtifactKeyVariable);
  if (value == nullptr || absl::StripAsciiWhitespace(value).empty()) return std::nullopt;
  auto key = ParseArtifactKey(value, kArtifactKeyVariable);
  if (!key.ok()) return key.status();
  return std::optional<std::string>(*std::move(key));
}

std::string ArtifactKeyFingerprint(const std::string& key) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(key.data(), key.size(), digest, &length, EVP_sha256(), nullptr);
  return Hex(std::string(reinterpret_cast<const char*>(digest), length)).substr(0, 16);
}

absl::StatusOr<std::string> SignArtifact(const std::string& zip, const std::string& key) {
  if (absl::Status s = CheckArtifactKey(key, "SignArtifact"); !s.ok()) return s;
  if (zip.size() < kEndOfDirectorySize ||
      U32(zip, zip.size() - kEndOfDirectorySize) != kEndOfDirectory ||
      U16(zip, zip.size() - kEndOfDirectorySize + kCommentLengthAt) != 0) {
    return absl::InvalidArgumentError(
        "SignArtifact: `zip` must be a zip file without an archive comment (its last 22 "
        "bytes the end-of-directory record)");
  }
  std::string signed_bytes = zip;
  const size_t length_at = zip.size() - kEndOfDirectorySize + kCommentLengthAt;
  signed_bytes[length_at] = static_cast<char>(kRecordSize & 0xff);
  signed_bytes[length_at + 1] = static_cast<char>(kRecordSize >> 8);
  const std::string mac = Hex(HmacSha256(key, signed_bytes));
  absl::StrAppend(&signed_bytes, kRecordPrefix, mac);
  return signed_bytes;
}

absl::StatusOr<ArtifactSignature> CheckArtifactSignature(const std::string& bytes,
                                                         const std::string* key) {
  if (bytes.size() < kRecordSize + kEndOfDirectorySize ||
      bytes.compare(bytes.size() - kRecordSize, kPrefixSize, kRecordPrefix) != 0) {
    return ArtifactSignature::kUnsigned;
  }
  const size_t end = bytes.size() - kRecordSize - kEndOfDirectorySize;
  if (U32(bytes, end) != kEndOfDirectory || U16(bytes, end + kCommentLengthAt) != kRecordSize) {
    return absl::DataLossError(
        "its signature record is not the archive's comment (the file was modified after "
        "signing, or is damaged)");
  }
  if (key == nullptr) return ArtifactSignature::kNotVerified;
  const std::string want = Hex(HmacSha256(*key, bytes.substr(0, bytes.size() - kRecordSize)));
  const char* got = bytes.data() + bytes.size() - kMacHexSize;
  if (CRYPTO_memcmp(want.data(), got, kMacHexSize) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        "its signature does not verify with key ", ArtifactKeyFingerprint(*key),
        ": it was changed after signing, or signed with another key"));
  }
  return ArtifactSignature::kVerified;
}

std::string DescribeArtifactSignature(ArtifactSignature signature, const std::string* key) {
  switch (signature) {
    case ArtifactSignature::kUnsigned:
      return "unsigned";
    case ArtifactSignature::kNotVerified:
      return "signed (HMAC-SHA256), not verified (no key)";
    case ArtifactSignature::kVerified:
      return absl::StrCat("signed (HMAC-SHA256), verified with key ",
                          key != nullptr ? ArtifactKeyFingerprint(*key) : "?");
  }
  return "?";
}

}  // namespace metafuse::runtime
