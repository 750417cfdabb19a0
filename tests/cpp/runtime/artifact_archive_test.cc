// runtime/program_value/artifact_archive: an archive Python's zipfile wrote
// (ZIP_STORED, bytes below) reads back member for member; archives this
// test writes from the zip format's layout round-trip (binary members,
// zip signatures inside member data, a trailing signature record up to
// 64 KiB); and each documented refusal comes with an error naming the file
// and what is wrong: a missing file, foreign and truncated bytes (every
// strict prefix), compressed and encrypted members, damaged headers,
// members or a directory past the end, duplicate names. Sha256Hex against
// the FIPS 180-2 test vectors.
#include "runtime/program_value/artifact_archive.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace metafuse::runtime {
namespace {

using Members = std::map<std::string, std::string>;

// zipfile.ZipFile(f, "w", ZIP_STORED) with writestr of manifest.json
// ('{"format": "x"}'), empty (no bytes) and dir/bin (00 01 02 ff 50 4b 05
// 06: an end-of-directory signature inside a member), by /usr/bin/python3.
const char kPythonZip[] =
    "\x50\x4b\x03\x04\x14\x00\x00\x00\x00\x00\x57\x43\x7d\x5d\xc3\x6d"
    "\x29\xd3\x0f\x00\x00\x00\x0f\x00\x00\x00\x0d\x00\x00\x00\x6d\x61"
    "\x6e\x69\x66\x65\x73\x74\x2e\x6a\x73\x6f\x6e\x7b\x22\x66\x6f\x72"
    "\x6d\x61\x74\x22\x3a\x20\x22\x78\x22\x7d\x50\x4b\x03\x04\x14\x00"
    "\x00\x00\x00\x00\x57\x43\x7d\x5d\x00\x00\x00\x00\x00\x00\x00\x00"
    "\x00\x00\x00\x00\x05\x00\x00\x00\x65\x6d\x70\x74\x79\x50\x4b\x03"
    "\x04\x14\x00\x00\x00\x00\x00\x57\x43\x7d\x5d\xa9\x8e\x2f\x67\x08"
    "\x00\x00\x00\x08\x00\x00\x00\x07\x00\x00\x00\x64\x69\x72\x2f\x62"
    "\x69\x6e\x00\x01\x02\xff\x50\x4b\x05\x06\x50\x4b\x01\x02\x14\x03"
    "\x14\x00\x00\x00\x00\x00\x57\x43\x7d\x5d\xc3\x6d\x29\xd3\x0f\x00"
    "\x00\x00\x0f\x00\x00\x00\x0d\x00\x00\x00\x00\x00\x00\x00\x00\x00"
    "\x00\x00\x80\x01\x00\x00\x00\x00\x6d\x61\x6e\x69\x66\x65\x73\x74"
    "\x2e\x6a\x73\x6f\x6e\x50\x4b\x01\x02\x14\x03\x14\x00\x00\x00\x00"
    "\x00\x57\x43\x7d\x5d\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
    "\x00\x05\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x80\x01\x3a"
    "\x00\x00\x00\x65\x6d\x70\x74\x79\x50\x4b\x01\x02\x14\x03\x14\x00"
    "\x00\x00\x00\x00\x57\x43\x7d\x5d\xa9\x8e\x2f\x67\x08\x00\x00\x00"
    "\x08\x00\x00\x00\x07\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
    "\x80\x01\x5d\x00\x00\x00\x64\x69\x72\x2f\x62\x69\x6e\x50\x4b\x05"
    "\x06\x00\x00\x00\x00\x03\x00\x03\x00\xa3\x00\x00\x00\x8a\x00\x00"
    "\x00\x00\x00";

std::string PythonZip() { return std::string(kPythonZip, sizeof(kPythonZip) - 1); }

const Members kPythonMembers = {
    {"manifest.json", "{\"format\": \"x\"}"},
    {"empty", ""},
    {"dir/bin", std::string("\x00\x01\x02\xff\x50\x4b\x05\x06", 8)},
};

// ---- A stored-zip writer from the format's layout (APPNOTE.TXT 4.3). ----

void Put16(std::string* out, uint32_t v) {
  out->push_back(static_cast<char>(v & 0xff));
  out->push_back(static_cast<char>((v >> 8) & 0xff));
}
void Put32(std::string* out, uint32_t v) {
  Put16(out, v & 0xffff);
  Put16(out, v >> 16);
}
void Set16(std::string* bytes, size_t at, uint32_t v) {
  (*bytes)[at] = static_cast<char>(v & 0xff);
  (*bytes)[at + 1] = static_cast<char>((v >> 8) & 0xff);
}
void Set32(std::string* bytes, size_t at, uint32_t v) {
  Set16(bytes, at, v & 0xffff);
  Set16(bytes, at + 2, v >> 16);
}

uint32_t Crc32(const std::string& data) {
  uint32_t crc = 0xffffffffu;
  for (unsigned char c : data) {
    crc ^= c;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

struct Member {
  std::string name, data;
  uint32_t method = 0, flags = 0;
};

// The bytes and where each record starts, for damaging them.
struct Zip {
  std::string bytes;
  std::vector<size_t> local, central;
  size_t directory = 0, end = 0;
};

Zip WriteZip(const std::vector<Member>& members, const std::string& comment = "") {
  Zip zip;
  std::string& b = zip.bytes;
  for (const Member& m : members) {
    zip.local.push_back(b.size());
    Put32(&b, 0x04034b50);
    Put16(&b, 20);        // version needed
    Put16(&b, m.flags);
    Put16(&b, m.method);
    Put32(&b, 0);         // time, date
    Put32(&b, Crc32(m.data));
    Put32(&b, m.data.size());  // compressed
    Put32(&b, m.data.size());  // uncompressed
    Put16(&b, m.name.size());
    Put16(&b, 0);         // extra
    b += m.name;
    b += m.data;
  }
  zip.directory = b.size();
  for (size_t k = 0; k < members.size(); ++k) {
    const Member& m = members[k];
    zip.central.push_back(b.size());
    Put32(&b, 0x02014b50);
    Put16(&b, 20);        // version made by
    Put16(&b, 20);        // version needed
    Put16(&b, m.flags);
    Put16(&b, m.method);
    Put32(&b, 0);         // time, date
    Put32(&b, Crc32(m.data));
    Put32(&b, m.data.size());
    Put32(&b, m.data.size());
    Put16(&b, m.name.size());
    Put16(&b, 0);         // extra
    Put16(&b, 0);         // comment
    Put16(&b, 0);         // disk
    Put16(&b, 0);         // internal attributes
    Put32(&b, 0);         // external attributes
    Put32(&b, zip.local[k]);
    b += m.name;
  }
  zip.end = b.size();
  Put32(&b, 0x06054b50);
  Put16(&b, 0);  // disk
  Put16(&b, 0);  // disk of the directory
  Put16(&b, members.size());
  Put16(&b, members.size());
  Put32(&b, zip.end - zip.directory);
  Put32(&b, zip.directory);
  Put16(&b, comment.size());
  b += comment;
  return zip;
}

Members Expected(const std::vector<Member>& members) {
  Members out;
  for (const Member& m : members) out[m.name] = m.data;
  return out;
}

// ---- Checks. ----

// The error names the archive and contains `what`.
void ExpectRefused(const absl::StatusOr<Members>& result, absl::StatusCode code,
                   const std::string& path, const std::string& what) {
  ASSERT_FALSE(result.ok()) << what << ": accepted";
  EXPECT_EQ(result.status().code(), code) << result.status();
  const std::string message(result.status().message());
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find(what), std::string::npos) << message;
}

class TempFile {
 public:
  explicit TempFile(const std::string& bytes) {
    char name[] = "/tmp/mf_artifact_archive_XXXXXX";
    const int fd = mkstemp(name);
    EXPECT_GE(fd, 0);
    close(fd);
    path_ = name;
    std::ofstream(path_, std::ios::binary) << bytes;
  }
  ~TempFile() { unlink(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(ArtifactArchive, ReadsWhatPythonsZipfileWrote) {
  auto parsed = ParseStoredZip(PythonZip(), "python.zip");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, kPythonMembers);
  // The listing: every member once, by name.
  std::vector<std::string> names;
  for (const auto& [name, bytes] : *parsed) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"dir/bin", "empty", "manifest.json"}));

  TempFile file(PythonZip());
  auto read = ReadStoredZip(file.path());
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, kPythonMembers);
}

TEST(ArtifactArchive, RoundTripsWhatItIsGiven) {
  std::string binary;
  for (int i = 0; i < 70000; ++i) binary.push_back(static_cast<char>((i * 131 + 7) & 0xff));
  // Zip record signatures inside member data must not confuse the reader.
  binary += std::string("PK\x01\x02PK\x03\x04PK\x05\x06", 12);
  const std::vector<Member> members = {
      {"manifest.json", "{\"format\": \"metafuse-aot 3\"}"},
      {"program.bin", binary},
      {"runner.pt", ""},
      {"kernels/a b.o", std::string("\0\0\0", 3)},
  };
  const Zip zip = WriteZip(members);
  auto parsed = ParseStoredZip(zip.bytes, "job.mfa");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, Expected(members));

  auto none = ParseStoredZip(WriteZip({}).bytes, "none.mfa");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());
}

// The signature record is the archive comment (artifact_signature.h): up
// to 64 KiB of bytes after the end-of-directory record are allowed.
TEST(ArtifactArchive, AllowsATrailingRecordUpTo64KiB) {
  const std::vector<Member> members = {{"a", "alpha"}, {"b", "beta"}};
  for (size_t length : {size_t{95}, size_t{65535}}) {
    const std::string comment(length, 's');
    auto parsed = ParseStoredZip(WriteZip(members, comment).bytes, "signed.mfa");
    ASSERT_TRUE(parsed.ok()) << length << ": " << parsed.status();
    EXPECT_EQ(*parsed, Expected(members));
  }
  // One byte more and the directory is out of reach.
  const std::string too_long = WriteZip(members, std::string(65535, 's')).bytes + "s";
  ExpectRefused(ParseStoredZip(too_long, "long.mfa"), absl::StatusCode::kDataLoss, "long.mfa",
                "no zip directory");
}

TEST(ArtifactArchive, AMissingFileIsNamed) {
  const std::string path = "/nonexistent/metafuse/job.mfa";
  auto read = ReadStoredZip(path);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(read.status().message().find(path), std::string::npos) << read.status();
}

TEST(ArtifactArchive, RefusesForeignBytes) {
  for (const std::string& bytes :
       {std::string(), std::string("not a zip"), std::string(21, 'P'),
        std::string("\x89PNG\r\n\x1a\n", 8) + std::string(100, '\0'),
        std::string("PK\x05\x06", 4)}) {
    ExpectRefused(ParseStoredZip(bytes, "foreign.bin"), absl::StatusCode::kDataLoss,
                  "foreign.bin", "no zip directory");
  }
}

// Every strict prefix of a real archive is refused, as damage (not one
// that parses to fewer members).
TEST(ArtifactArchive, RefusesEveryTruncation) {
  const std::string full = PythonZip();
  for (size_t length = 0; length < full.size(); ++length) {
    auto parsed = ParseStoredZip(full.substr(0, length), "cut.mfa");
    ASSERT_FALSE(parsed.ok()) << "a prefix of " << length << " bytes was accepted";
    EXPECT_NE(parsed.status().message().find("cut.mfa is not a complete metafuse artifact"),
              std::string::npos)
        << length << ": " << parsed.status();
  }
}

TEST(ArtifactArchive, RefusesCompressedAndEncryptedMembers) {
  ExpectRefused(ParseStoredZip(WriteZip({{"a", "x"}, {"deflated", "yy", 8, 0}}).bytes, "c.mfa"),
                absl::StatusCode::kInvalidArgument, "c.mfa",
                "member deflated is compressed or encrypted");
  ExpectRefused(ParseStoredZip(WriteZip({{"secret", "zz", 0, 1}}).bytes, "e.mfa"),
                absl::StatusCode::kInvalidArgument, "e.mfa",
                "member secret is compressed or encrypted");
  // Sizes that disagree mean a compressed member too.
  Zip zip = WriteZip({{"a", "abcd"}});
  Set32(&zip.bytes, zip.central[0] + 20, 3);
  ExpectRefused(ParseStoredZip(zip.bytes, "s.mfa"), absl::StatusCode::kInvalidArgument, "s.mfa",
                "member a is compressed or encrypted");
}

// One damage to an archive of members a, b, c and the error it gets.
struct Damage {
  std::string what;  // the error names it
  std::function<void(Zip*)> apply;
};

TEST(ArtifactArchive, RefusesDamagedRecords) {
  const std::vector<Damage> damages = {
      {"directory entry 1 is damaged", [](Zip* z) { z->bytes[z->central[1]] = 'X'; }},
      // A count of more entries than the directory holds.
      {"directory entry 3 is damaged", [](Zip* z) { Set16(&z->bytes, z->end + 10, 4); }},
      // A name running into the end-of-directory record.
      {"directory entry 2 is damaged",
       [](Zip* z) { Set16(&z->bytes, z->central[2] + 28, 200); }},
      {"the header of b is damaged", [](Zip* z) { z->bytes[z->local[1] + 2] = 0; }},
      // A local header placed inside the directory.
      {"the header of c is damaged",
       [](Zip* z) { Set32(&z->bytes, z->central[2] + 42, z->directory + 4); }},
      {"member c is truncated",
       [](Zip* z) {
         Set32(&z->bytes, z->central[2] + 20, 1000);
         Set32(&z->bytes, z->central[2] + 24, 1000);
       }},
      // A local name length that pushes the data into the directory.
      {"member c is truncated", [](Zip* z) { Set16(&z->bytes, z->local[2] + 26, 60); }},
      {"the directory reaches past its end",
       [](Zip* z) { Set32(&z->bytes, z->end + 16, z->directory + 1); }},
      {"the directory reaches past its end",
       [](Zip* z) { Set32(&z->bytes, z->end + 12, 0xfffffff0u); }},
  };
  for (const Damage& damage : damages) {
    Zip zip = WriteZip({{"a", "first"}, {"b", "second"}, {"c", "third"}});
    damage.apply(&zip);
    ExpectRefused(ParseStoredZip(zip.bytes, "damaged.mfa"), absl::StatusCode::kDataLoss,
                  "damaged.mfa", damage.what);
  }
}

TEST(ArtifactArchive, RefusesDuplicateNames) {
  ExpectRefused(
      ParseStoredZip(WriteZip({{"program.bin", "one"}, {"x", "y"}, {"program.bin", "two"}}).bytes,
                     "dup.mfa"),
      absl::StatusCode::kInvalidArgument, "dup.mfa", "member program.bin appears twice");
}

// Two names for the same bytes: the header promises that members which
// overlap are refused, and ParseStoredZip accepts them (each directory
// entry becomes a copy of the bytes: 65535 entries naming one large member
// ask for 65535 copies). Disabled until artifact_archive.cc checks it
// (issue 40, item 5 report); enable it with that fix.
TEST(ArtifactArchive, RefusesOverlappingMembers) {
  Zip zip = WriteZip({{"a", "shared bytes"}, {"b", "other"}});
  Set32(&zip.bytes, zip.central[1] + 42, zip.local[0]);
  Set32(&zip.bytes, zip.central[1] + 20, 12);
  Set32(&zip.bytes, zip.central[1] + 24, 12);
  auto parsed = ParseStoredZip(zip.bytes, "overlap.mfa");
  ASSERT_FALSE(parsed.ok()) << "members a and b share their bytes and were accepted";
  EXPECT_NE(std::string(parsed.status().message()).find("members a and b overlap"),
            std::string::npos)
      << parsed.status().message();
}

TEST(ArtifactArchive, Sha256MatchesTheFipsVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Sha256Hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // Binary data with NULs is hashed whole, not up to the first NUL.
  EXPECT_NE(Sha256Hex(std::string("a\0b", 3)), Sha256Hex("a"));
}

}  // namespace
}  // namespace metafuse::runtime
