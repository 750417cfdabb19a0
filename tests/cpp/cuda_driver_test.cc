#include "runtime/cuda/cuda_driver.h"

#include <gtest/gtest.h>

namespace metafuse::runtime {
namespace {

TEST(CudaDriver, LoadEitherSucceedsOrExplainsWhy) {
  auto driver = CudaDriver::Load();
  if (driver.ok()) {
    EXPECT_GT((*driver)->device_count, 0);
    auto cc = ComputeCapability(**driver, 0);
    ASSERT_TRUE(cc.ok()) << cc.status();
    EXPECT_GE(*cc, 50);
    return;
  }
  // No driver here: the reason must be a clear, actionable message.
  const std::string message(driver.status().message());
  EXPECT_NE(message.find("CUDA is unavailable"), std::string::npos) << message;
  EXPECT_TRUE(driver.status().code() == absl::StatusCode::kNotFound ||
              driver.status().code() == absl::StatusCode::kFailedPrecondition)
      << driver.status();
}

TEST(CudaDriver, LoadIsStable) {
  // The second call returns the same answer without re-running dlopen.
  auto first = CudaDriver::Load();
  auto second = CudaDriver::Load();
  EXPECT_EQ(first.ok(), second.ok());
  if (!first.ok()) {
    EXPECT_EQ(first.status(), second.status());
  }
}

}  // namespace
}  // namespace metafuse::runtime
