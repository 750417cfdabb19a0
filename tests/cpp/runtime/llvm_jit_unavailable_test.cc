// The LLVM-free LlvmJit (pip builds with METAFUSE_WITH_LLVM=0): Create fails
// with a status that says why, so callers can fall back instead of crashing.
#include <gtest/gtest.h>

#include "runtime/jit/llvm_jit.h"

namespace metafuse::runtime {
namespace {

TEST(LlvmJitUnavailable, ReportsNoLlvmAndNoHostTarget) {
  EXPECT_FALSE(LlvmAvailable());
  EXPECT_EQ(LlvmHostTarget(), "");
}

TEST(LlvmJitUnavailable, CreateSaysThisBuildHasNoLlvm) {
  auto jit = LlvmJit::Create();
  ASSERT_FALSE(jit.ok());
  EXPECT_EQ(jit.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(jit.status().message().find("no LLVM"), std::string::npos)
      << jit.status().message();
  EXPECT_NE(jit.status().message().find("METAFUSE_WITH_LLVM"), std::string::npos)
      << jit.status().message();
}

}  // namespace
}  // namespace metafuse::runtime
