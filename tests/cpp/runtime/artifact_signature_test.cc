// Artifact signatures: HMAC-SHA256 against RFC 4231's test vectors (and
// SHA-256 against FIPS 180-4's through the key fingerprint), keys, signing,
// and verification that fails on a changed byte, another key, a moved
// record.
#include "runtime/program_value/artifact_signature.h"

#include <cstdlib>
#include <string>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"

namespace metafuse::runtime {
namespace {

std::string Hex(const std::string& raw) {
  std::string hex;
  for (unsigned char c : raw) absl::StrAppendFormat(&hex, "%02x", c);
  return hex;
}

TEST(HmacSha256, Rfc4231TestCases) {
  // Test case 1.
  EXPECT_EQ(Hex(HmacSha256(std::string(20, '\x0b'), "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  // Test case 2: a key shorter than the block.
  EXPECT_EQ(Hex(HmacSha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Test case 3.
  EXPECT_EQ(Hex(HmacSha256(std::string(20, '\xaa'), std::string(50, '\xdd'))),
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  // Test case 6: a key longer than the block (hashed first).
  EXPECT_EQ(Hex(HmacSha256(std::string(131, '\xaa'),
                           "Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(ArtifactKey, FingerprintIsTheSha256OfTheKey) {
  // FIPS 180-4's example "abc": ba7816bf8f01cfea414140de5dae2223...
  EXPECT_EQ(ArtifactKeyFingerprint("abc"), "ba7816bf8f01cfea");
}

TEST(ArtifactKey, HexWithWhitespaceParses) {
  auto key = ParseArtifactKey("  00112233445566778899AABBCCDDEEFF\n", "test");
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_EQ(Hex(*key), "00112233445566778899aabbccddeeff");
}

TEST(ArtifactKey, BadKeysNameTheSourceAndTheRule) {
  for (const char* bad : {"0011", "0g112233445566778899aabbccddeeff",
                          "00112233445566778899aabbccddeeff0"}) {
    auto key = ParseArtifactKey(bad, "key file k.hex");
    ASSERT_FALSE(key.ok()) << bad;
    EXPECT_NE(key.status().message().find("key file k.hex"), std::string::npos) << key.status();
    EXPECT_NE(key.status().message().find("at least 16 bytes"), std::string::npos)
        << key.status();
  }
}

TEST(ArtifactKey, FromTheEnvironment) {
  unsetenv(kArtifactKeyVariable);
  auto none = ArtifactKeyFromEnvironment();
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  setenv(kArtifactKeyVariable, "00112233445566778899aabbccddeeff", 1);
  auto key = ArtifactKeyFromEnvironment();
  ASSERT_TRUE(key.ok() && key->has_value());
  EXPECT_EQ(key->value().size(), 16u);
  setenv(kArtifactKeyVariable, "not hex", 1);
  auto bad = ArtifactKeyFromEnvironment();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("METAFUSE_ARTIFACT_KEY"), std::string::npos);
  unsetenv(kArtifactKeyVariable);
}

// A minimal zip: one end-of-directory record, no members, no comment,
// after some bytes standing for members.
std::string Zip() {
  std::string zip = "member bytes";
  zip += std::string("PK\x05\x06", 4) + std::string(18, '\0');
  return zip;
}

const std::string kKey(32, '\x42');

TEST(ArtifactSignature, SignedVerifiesWithItsKeyOnly) {
  auto signed_zip = SignArtifact(Zip(), kKey);
  ASSERT_TRUE(signed_zip.ok()) << signed_zip.status();
  EXPECT_EQ(signed_zip->size(), Zip().size() + 95);
  // The comment length counts the record, and the MAC covers it.
  EXPECT_EQ(static_cast<unsigned char>((*signed_zip)[Zip().size() - 2]), 95);
  EXPECT_EQ(Hex(HmacSha256(kKey, signed_zip->substr(0, Zip().size()))),
            signed_zip->substr(signed_zip->size() - 64));

  auto verified = CheckArtifactSignature(*signed_zip, &kKey);
  ASSERT_TRUE(verified.ok()) << verified.status();
  EXPECT_EQ(*verified, ArtifactSignature::kVerified);
  EXPECT_EQ(DescribeArtifactSignature(*verified, &kKey),
            "signed (HMAC-SHA256), verified with key " + ArtifactKeyFingerprint(kKey));

  auto no_key = CheckArtifactSignature(*signed_zip, nullptr);
  ASSERT_TRUE(no_key.ok());
  EXPECT_EQ(*no_key, ArtifactSignature::kNotVerified);
  EXPECT_EQ(DescribeArtifactSignature(*no_key, nullptr),
            "signed (HMAC-SHA256), not verified (no key)");

  const std::string other(32, '\x43');
  auto wrong = CheckArtifactSignature(*signed_zip, &other);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(wrong.status().message().find("does not verify with key " +
                                          ArtifactKeyFingerprint(other)),
            std::string::npos)
      << wrong.status();
}

TEST(ArtifactSignature, EveryChangedByteFailsToVerify) {
  const std::string signed_zip = *SignArtifact(Zip(), kKey);
  for (size_t i = 0; i < signed_zip.size(); ++i) {
    std::string changed = signed_zip;
    changed[i] = static_cast<char>(changed[i] ^ 0x01);
    auto check = CheckArtifactSignature(changed, &kKey);
    EXPECT_FALSE(check.ok() && *check == ArtifactSignature::kVerified) << "byte " << i;
  }
}

TEST(ArtifactSignature, UnsignedAndMovedRecords) {
  auto unsigned_zip = CheckArtifactSignature(Zip(), &kKey);
  ASSERT_TRUE(unsigned_zip.ok());
  EXPECT_EQ(*unsigned_zip, ArtifactSignature::kUnsigned);
  EXPECT_EQ(DescribeArtifactSignature(*unsigned_zip, &kKey), "unsigned");
  // A record pasted after other bytes is not the archive's comment.
  const std::string signed_zip = *SignArtifact(Zip(), kKey);
  const std::string moved = "x" + Zip() + signed_zip.substr(Zip().size());
  auto check = CheckArtifactSignature(moved, &kKey);
  EXPECT_FALSE(check.ok());
  EXPECT_EQ(check.status().code(), absl::StatusCode::kDataLoss);
}

TEST(ArtifactSignature, SigningRefusesShortKeysAndCommentedZips) {
  EXPECT_FALSE(SignArtifact(Zip(), "short").ok());
  EXPECT_FALSE(SignArtifact(*SignArtifact(Zip(), kKey), kKey).ok());  // already signed
  EXPECT_FALSE(SignArtifact("not a zip", kKey).ok());
}

}  // namespace
}  // namespace metafuse::runtime
