#include "runtime/cuda/cuda_driver.h"

#include <dlfcn.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>

namespace metafuse::runtime {
namespace {

// What this machine has, found without CudaDriver: whether the driver
// library loads and whether a device node exists. The test then expects one
// answer, instead of accepting whichever Load gives.
bool DriverLibraryLoads() {
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle != nullptr) dlclose(handle);
  return handle != nullptr;
}

bool DeviceNodeExists() { return access("/dev/nvidia0", F_OK) == 0; }

TEST(CudaDriver, LoadsWhereADriverAndDeviceAreAndExplainsWhyNotElsewhere) {
  const bool library = DriverLibraryLoads(), device = DeviceNodeExists();
  auto driver = CudaDriver::Load();
  if (library && device) {
    ASSERT_TRUE(driver.ok()) << "libcuda.so.1 loads and /dev/nvidia0 exists, but "
                             << driver.status();
    EXPECT_GT((*driver)->device_count, 0);
    auto cc = ComputeCapability(**driver, 0);
    ASSERT_TRUE(cc.ok()) << cc.status();
    EXPECT_GE(*cc, 50);
    return;
  }
  ASSERT_FALSE(driver.ok()) << "no " << (library ? "/dev/nvidia0" : "libcuda.so.1")
                            << " here, yet the driver loaded";
  const std::string message(driver.status().message());
  EXPECT_NE(message.find("CUDA is unavailable"), std::string::npos) << message;
  if (!library) {
    EXPECT_EQ(driver.status().code(), absl::StatusCode::kNotFound) << driver.status();
    EXPECT_NE(message.find("libcuda.so.1 could not be loaded"), std::string::npos) << message;
  } else {
    EXPECT_EQ(driver.status().code(), absl::StatusCode::kFailedPrecondition)
        << driver.status();
  }
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
