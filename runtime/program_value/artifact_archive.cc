#include "runtime/program_value/artifact_archive.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace metafuse::runtime {
namespace {

constexpr uint32_t kLocalHeader = 0x04034b50;
constexpr uint32_t kCentralHeader = 0x02014b50;
constexpr uint32_t kEndOfDirectory = 0x06054b50;
constexpr size_t kEndOfDirectorySize = 22, kCentralSize = 46, kLocalSize = 30;

// Little-endian fields at `offset`, bounds-checked by the callers.
uint32_t U16(const std::string& b, size_t offset) {
  return static_cast<uint8_t>(b[offset]) | static_cast<uint8_t>(b[offset + 1]) << 8;
}
uint32_t U32(const std::string& b, size_t offset) {
  return U16(b, offset) | U16(b, offset + 2) << 16;
}

}  // namespace

absl::StatusOr<std::map<std::string, std::string>> ReadStoredZip(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return ParseStoredZip(bytes, path);
}

absl::StatusOr<std::map<std::string, std::string>> ParseStoredZip(const std::string& bytes,
                                                                  const std::string& path) {
  const std::string what = absl::StrCat(path, " is not a complete metafuse artifact (");
  // The end-of-directory record is last; Python writes no archive comment
  // but a signature record (artifact_signature.h), and up to 64 KiB of one
  // is allowed.
  size_t end = std::string::npos;
  if (bytes.size() >= kEndOfDirectorySize) {
    const size_t last = bytes.size() - kEndOfDirectorySize;
    const size_t first = last > 65535 ? last - 65535 : 0;
    for (size_t i = last + 1; i-- > first;) {
      if (U32(bytes, i) == kEndOfDirectory) {
        end = i;
        break;
      }
    }
  }
  if (end == std::string::npos) {
    return absl::DataLossError(absl::StrCat(what, "no zip directory: truncated or not a zip)"));
  }
  const uint32_t count = U16(bytes, end + 10);
  const size_t directory = U32(bytes, end + 16), directory_size = U32(bytes, end + 12);
  if (directory + directory_size > end) {
    return absl::DataLossError(absl::StrCat(what, "the directory reaches past its end)"));
  }
  std::map<std::string, std::string> members;
  // Each member's bytes, header to end: no two may share any (a crafted
  // directory could name one large member many times, and each name is a
  // copy).
  std::vector<std::tuple<size_t, size_t, std::string>> spans;
  size_t at = directory;
  for (uint32_t k = 0; k < count; ++k) {
    if (at + kCentralSize > end || U32(bytes, at) != kCentralHeader) {
      return absl::DataLossError(absl::StrCat(what, "directory entry ", k, " is damaged)"));
    }
    const uint32_t flags = U16(bytes, at + 8), method = U16(bytes, at + 10);
    const size_t compressed = U32(bytes, at + 20), size = U32(bytes, at + 24);
    const size_t name_length = U16(bytes, at + 28), extra = U16(bytes, at + 30),
                 comment = U16(bytes, at + 32), local = U32(bytes, at + 42);
    if (at + kCentralSize + name_length > end) {
      return absl::DataLossError(absl::StrCat(what, "directory entry ", k, " is damaged)"));
    }
    const std::string name = bytes.substr(at + kCentralSize, name_length);
    if (method != 0 || (flags & 1) != 0 || compressed != size) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, "member ", name, " is compressed or encrypted; metafuse writes stored members)"));
    }
    if (local + kLocalSize > directory || U32(bytes, local) != kLocalHeader) {
      return absl::DataLossError(absl::StrCat(what, "the header of ", name, " is damaged)"));
    }
    const size_t data = local + kLocalSize + U16(bytes, local + 26) + U16(bytes, local + 28);
    if (data + size > directory) {
      return absl::DataLossError(absl::StrCat(what, "member ", name, " is truncated)"));
    }
    if (members.count(name) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, "member ", name, " appears twice)"));
    }
    spans.emplace_back(local, data + size, name);
    members.emplace(name, bytes.substr(data, size));
    at += kCentralSize + name_length + extra + comment;
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i) {
    if (std::get<0>(spans[i]) < std::get<1>(spans[i - 1])) {
      return absl::DataLossError(absl::StrCat(what, "members ", std::get<2>(spans[i - 1]),
                                              " and ", std::get<2>(spans[i]), " overlap)"));
    }
  }
  return members;
}

std::string Sha256Hex(const std::string& data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(data.data(), data.size(), digest, &length, EVP_sha256(), nullptr);
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) absl::StrAppendFormat(&hex, "%02x", digest[i]);
  return hex;
}

}  // namespace metafuse::runtime
