// runtime/executor/buffer_pool: large CPU allocations made while a program runs on
// this thread come back from the pool at the next allocation of their size
// (the same memory); allocations outside a program, and small ones, never
// touch it; c10's raw allocation (oneDNN's scratchpads) works through it;
// ReleaseBufferPool empties it.
#include "runtime/executor/buffer_pool.h"

#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

namespace metafuse::runtime {
namespace {

TEST(BufferPool, ReusesLargeBuffersOfProgramsOnly) {
  InstallBufferPool();
  ReleaseBufferPool();
  const BufferPoolStats start = GetBufferPoolStats();
  void* first = nullptr;
  {
    ProgramAllocationScope scope;
    at::Tensor a = at::empty({1 << 18});  // 1 MiB
    first = a.data_ptr();
    a.fill_(1.0f);
  }
  BufferPoolStats s = GetBufferPoolStats();
  EXPECT_EQ(s.fresh, start.fresh + 1);
  EXPECT_EQ(s.cached_bytes, 1 << 20);
  {
    ProgramAllocationScope scope;
    at::Tensor b = at::empty({1 << 18});
    EXPECT_EQ(b.data_ptr(), first);  // the same block
    b.fill_(2.0f);
    EXPECT_EQ(b.sum().item<float>(), 2.0f * (1 << 18));
    at::Tensor small = at::empty({16});  // below the pool's smallest size
    small.fill_(0.0f);
  }
  s = GetBufferPoolStats();
  EXPECT_EQ(s.reused, start.reused + 1);
  EXPECT_EQ(s.fresh, start.fresh + 1);
  // Outside a program: not from the pool, not into it.
  {
    at::Tensor c = at::empty({1 << 18});
    EXPECT_NE(c.data_ptr(), first);
  }
  EXPECT_EQ(GetBufferPoolStats().cached_bytes, 1 << 20);
  ReleaseBufferPool();
  EXPECT_EQ(GetBufferPoolStats().cached_bytes, 0);
}

TEST(BufferPool, RawAllocationsWorkThroughIt) {
  InstallBufferPool();
  ProgramAllocationScope scope;
  c10::Allocator* allocator = c10::GetCPUAllocator();
  for (size_t bytes : {size_t{64}, size_t{1} << 20}) {
    void* p = allocator->raw_allocate(bytes);
    ASSERT_NE(p, nullptr);
    static_cast<char*>(p)[bytes - 1] = 1;
    allocator->raw_deallocate(p);
  }
}

}  // namespace
}  // namespace metafuse::runtime
