#include "compiler/codegen/kernel_ir_parser.h"

#include <gtest/gtest.h>

#include "tests/cpp/codegen/random_kernels.h"
#include "tests/cpp/codegen/test_kernels.h"

namespace metafuse::codegen::kir {
namespace {

using testing::DType;

void ExpectRoundTrip(const Kernel& k) {
  const std::string text = Print(k);
  auto parsed = Parse(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << text;
  EXPECT_EQ(Print(*parsed), text);
  EXPECT_EQ(StructuralHash(*parsed), StructuralHash(k));
  EXPECT_EQ(parsed->name, k.name);
  ASSERT_EQ(parsed->nodes.size(), k.nodes.size());
  for (size_t i = 0; i < k.nodes.size(); ++i) {
    // Constants bit for bit (NaN, -0 included).
    EXPECT_EQ(std::memcmp(&parsed->nodes[i].value, &k.nodes[i].value, sizeof(double)), 0)
        << k.name << " %" << i;
  }
}

TEST(KernelIrParser, PrintedKernelsRoundTrip) {
  for (DType t : {DType::kF32, DType::kF64}) {
    ExpectRoundTrip(testing::AllOpsKernel(t));
    ExpectRoundTrip(testing::PassThroughKernel(t));
    ExpectRoundTrip(testing::AdamKernel(t));
  }
  for (uint32_t seed = 1; seed <= 150; ++seed) ExpectRoundTrip(testing::RandomKernel(seed));
}

TEST(KernelIrParser, ErrorsNameTheLineAndWhatWasExpected) {
  const std::string good = Print(testing::AdamKernel());
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    text.replace(text.find(from), from.size(), to);
    return Parse(text).status();
  };
  absl::Status s = replace("= add", "= plus");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("an op name, not 'plus'"), std::string::npos) << s;
  s = replace(": f32 [i]", ": f16 [i]");
  EXPECT_NE(s.message().find("line 2: expected a dtype (f32 or f64)"), std::string::npos) << s;
  s = replace("}\n", "");
  EXPECT_NE(s.message().find("expected '}'"), std::string::npos) << s;
  s = replace("kernel ", "kern ");
  EXPECT_NE(s.message().find("line 1: expected 'kernel '"), std::string::npos) << s;
  s = replace("  out 0", "  out 5");
  EXPECT_NE(s.message().find("outputs numbered in order"), std::string::npos) << s;
  // Well-formed text of an invalid kernel: Validate's error.
  s = replace("out 0 m_out = %", "out 0 m_out = %9");
  EXPECT_FALSE(s.ok());
  EXPECT_FALSE(Parse("").ok());
}

}  // namespace
}  // namespace metafuse::codegen::kir
