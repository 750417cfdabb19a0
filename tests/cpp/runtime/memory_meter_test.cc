// runtime/base/memory_meter: live bytes, peak and allocation counts against
// the tensors this test allocates and frees (a tensor of n floats is one
// allocation of 4n bytes through c10's CPU allocator), from several threads
// too; memory allocated before installation is neither counted nor
// subtracted when freed; ResetPeakMemory starts a new region.
//
// The meter is installed once per process: the first test checks the state
// before installation and must run first (gtest runs tests in file order).
#include "runtime/base/memory_meter.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <optional>
#include <thread>
#include <vector>

namespace metafuse::runtime {
namespace {

at::Tensor Floats(int64_t n) { return at::empty({n}, at::TensorOptions().dtype(at::kFloat)); }

TEST(MemoryMeter, CountsNothingMadeBeforeItWasInstalled) {
  if (MemoryMeterInstalled()) GTEST_SKIP() << "installed by an earlier test (shuffled order)";
  std::optional<at::Tensor> before = Floats(1000);
  const MemoryStats none = GetMemoryStats();
  EXPECT_EQ(none.live_bytes, 0);
  EXPECT_EQ(none.allocations, 0);
  InstallMemoryMeter();
  EXPECT_TRUE(MemoryMeterInstalled());
  const MemoryStats start = GetMemoryStats();
  before.reset();  // freed by the allocator it came from: not subtracted
  EXPECT_EQ(GetMemoryStats().live_bytes, start.live_bytes);
  at::Tensor after = Floats(256);
  EXPECT_EQ(GetMemoryStats().live_bytes, start.live_bytes + 1024);
  EXPECT_EQ(GetMemoryStats().allocations, start.allocations + 1);
}

TEST(MemoryMeter, InstallingTwiceChangesNothing) {
  InstallMemoryMeter();
  const MemoryStats start = GetMemoryStats();
  InstallMemoryMeter();
  at::Tensor x = Floats(10);
  // Counted once, not by two stacked meters.
  EXPECT_EQ(GetMemoryStats().live_bytes, start.live_bytes + 40);
  EXPECT_EQ(GetMemoryStats().allocations, start.allocations + 1);
}

TEST(MemoryMeter, LiveAndPeakFollowAllocationsAndFrees) {
  InstallMemoryMeter();
  ResetPeakMemory();
  const MemoryStats start = GetMemoryStats();
  EXPECT_EQ(start.peak_bytes, start.live_bytes);
  const int64_t base = start.live_bytes;
  std::optional<at::Tensor> a = Floats(1000);                           // +4000
  std::optional<at::Tensor> b = at::empty({500}, at::kDouble);          // +4000
  EXPECT_EQ(GetMemoryStats().live_bytes, base + 8000);
  a.reset();                                                            // -4000
  std::optional<at::Tensor> c = at::empty({300}, at::kShort);           // +600
  MemoryStats now = GetMemoryStats();
  EXPECT_EQ(now.live_bytes, base + 4600);
  EXPECT_EQ(now.peak_bytes, base + 8000);
  EXPECT_EQ(now.allocations, start.allocations + 3);
  // A new region: its peak starts from the live level.
  ResetPeakMemory();
  EXPECT_EQ(GetMemoryStats().peak_bytes, base + 4600);
  b.reset();
  c.reset();
  std::optional<at::Tensor> d = Floats(100);                            // +400
  now = GetMemoryStats();
  EXPECT_EQ(now.live_bytes, base + 400);
  EXPECT_EQ(now.peak_bytes, base + 4600);
  d.reset();
  EXPECT_EQ(GetMemoryStats().live_bytes, base);
}

TEST(MemoryMeter, CountsWhatOperationsAllocate) {
  InstallMemoryMeter();
  const at::Tensor x = Floats(64).fill_(1), y = Floats(64).fill_(2);
  const MemoryStats start = GetMemoryStats();
  {
    const at::Tensor z = x + y;  // one output of 64 floats
    EXPECT_EQ(GetMemoryStats().live_bytes, start.live_bytes + 256);
    EXPECT_EQ(z[5].item<float>(), 3.f);
    // A view shares its base's memory: nothing allocated.
    const at::Tensor v = z.view({8, 8});
    EXPECT_EQ(GetMemoryStats().live_bytes, start.live_bytes + 256);
  }
  EXPECT_EQ(GetMemoryStats().live_bytes, start.live_bytes);
  // Memory the caller owns is not the allocator's.
  std::vector<float> owned(1000);
  const at::Tensor wrapped = at::from_blob(owned.data(), {1000});
  EXPECT_EQ(GetMemoryStats().live_bytes, start.live_bytes);
}

TEST(MemoryMeter, CountsAllocationsFromSeveralThreads) {
  InstallMemoryMeter();
  ResetPeakMemory();
  const MemoryStats start = GetMemoryStats();
  constexpr int kThreads = 4, kRounds = 200;
  std::vector<std::thread> threads;
  std::vector<std::vector<at::Tensor>> kept(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &kept] {
      for (int r = 0; r < kRounds; ++r) {
        at::Tensor temporary = Floats(16 + r);  // freed at once
        if (r % 10 == 0) kept[t].push_back(Floats(25));  // 100 bytes kept
      }
    });
  }
  for (std::thread& th : threads) th.join();
  MemoryStats now = GetMemoryStats();
  // 20 kept tensors of 100 bytes per thread are live; everything else is
  // freed; two allocations per 10 rounds are one more than the rounds.
  EXPECT_EQ(now.live_bytes, start.live_bytes + kThreads * 20 * 100);
  EXPECT_EQ(now.allocations, start.allocations + kThreads * (kRounds + 20));
  // No interleaving holds more than every thread's kept tensors and one
  // temporary each (the largest 4 * (16 + 199) bytes).
  EXPECT_GE(now.peak_bytes, now.live_bytes);
  EXPECT_LE(now.peak_bytes, start.live_bytes + kThreads * (20 * 100 + 4 * 215));
  kept.clear();
  EXPECT_EQ(GetMemoryStats().live_bytes, start.live_bytes);
}

}  // namespace
}  // namespace metafuse::runtime
