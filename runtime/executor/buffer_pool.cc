#include "runtime/executor/buffer_pool.h"

#include <c10/core/CPUAllocator.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/base/torch_compat.h"

namespace metafuse::runtime {
namespace {

constexpr size_t kSmallest = size_t{128} << 10;
constexpr size_t kPage = 4096;

thread_local int program_depth = 0;

int64_t BoundFromEnvironment() {
  const char* value = std::getenv("METAFUSE_BUFFER_POOL_MB");
  if (value == nullptr || *value == '\0') return int64_t{1024} << 20;
  char* end = nullptr;
  const long long mb = std::strtoll(value, &end, 10);
  TORCH_CHECK(end != value && *end == '\0' && mb >= 0,
              "METAFUSE_BUFFER_POOL_MB must be a whole number of MiB >= 0, got '", value, "'");
  return static_cast<int64_t>(mb) << 20;
}

// A block from the base allocator (its DataPtr frees it) and its size.
struct Block {
  c10::DataPtr original;
  size_t bytes;
};

class Pool {
 public:
  explicit Pool(int64_t bound) : bound_(bound) {}

  // A block of `bytes` for a new tensor: a kept one, else a fresh one from
  // `base`; recorded by its data pointer (the DataPtr's context, which
  // c10's raw_allocate requires to be the data) until Reclaim.
  Block* Lend(size_t bytes, c10::Allocator* base) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = free_.find(bytes);
      if (it != free_.end() && !it->second.empty()) {
        Block* block = it->second.back();
        it->second.pop_back();
        cached_ -= static_cast<int64_t>(bytes);
        ++reused_;
        lent_[block->original.get()] = block;
        return block;
      }
    }
    auto* block = new Block{base->allocate(bytes), bytes};  // outside the lock
    std::lock_guard<std::mutex> lock(mutex_);
    ++fresh_;
    lent_[block->original.get()] = block;
    return block;
  }

  void Give(Block* block) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (cached_ + static_cast<int64_t>(block->bytes) <= bound_) {
        cached_ += static_cast<int64_t>(block->bytes);
        free_[block->bytes].push_back(block);
        return;
      }
    }
    delete block;  // over the bound: back to the system
  }

  // The lent block at `data`, forgotten; nullptr if the pool did not lend it.
  Block* Reclaim(void* data) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = lent_.find(data);
    if (it == lent_.end()) return nullptr;
    Block* block = it->second;
    lent_.erase(it);
    return block;
  }

  void Release() {
    std::vector<Block*> blocks;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto& [bytes, list] : free_) blocks.insert(blocks.end(), list.begin(), list.end());
      free_.clear();
      cached_ = 0;
    }
    for (Block* b : blocks) delete b;
  }

  BufferPoolStats Stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return {cached_, reused_, fresh_};
  }

 private:
  const int64_t bound_;
  std::mutex mutex_;
  std::unordered_map<size_t, std::vector<Block*>> free_;
  std::unordered_map<void*, Block*> lent_;
  int64_t cached_ = 0, reused_ = 0, fresh_ = 0;
};

Pool* pool = nullptr;  // set once by InstallBufferPool, never destroyed
c10::DeleterFnPtr base_raw_deleter = nullptr;

// The deleter of every block the pool lends, and the raw deleter of
// anything raw_allocate took from this allocator (the base's, then).
void ReturnToPool(void* data) {
  if (Block* block = pool->Reclaim(data)) {
    pool->Give(block);
  } else {
    TORCH_INTERNAL_ASSERT(base_raw_deleter != nullptr,
                          "metafuse buffer pool: a raw pointer the pool did not lend, and the "
                          "base allocator has no raw deleter");
    base_raw_deleter(data);
  }
}

class PoolingAllocator final : public compat::WrappingAllocator {
 public:
  explicit PoolingAllocator(c10::Allocator* base) : WrappingAllocator(base) {}

  c10::DataPtr Allocate(size_t n) const override {
    if (program_depth == 0 || n < kSmallest) return base()->allocate(n);
    const size_t bytes = (n + kPage - 1) / kPage * kPage;
    Block* block = pool->Lend(bytes, base());
    void* data = block->original.get();
    return {data, data, &ReturnToPool, block->original.device()};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &ReturnToPool; }
};

}  // namespace

void InstallBufferPool() {
  static std::once_flag once;
  std::call_once(once, [] {
    const int64_t bound = BoundFromEnvironment();
    if (bound == 0) return;
    pool = new Pool(bound);
    c10::Allocator* base = c10::GetCPUAllocator();
    base_raw_deleter = base->raw_deleter();
    static PoolingAllocator pooling(base);
    // Above c10's default CPU allocator, below the memory meter (100): a
    // meter installed first keeps counting, and the pool then stays out.
    c10::SetCPUAllocator(&pooling, /*priority=*/50);
  });
}

ProgramAllocationScope::ProgramAllocationScope() { ++program_depth; }
ProgramAllocationScope::~ProgramAllocationScope() { --program_depth; }

BufferPoolStats GetBufferPoolStats() { return pool == nullptr ? BufferPoolStats{} : pool->Stats(); }

void ReleaseBufferPool() {
  if (pool != nullptr) pool->Release();
}

}  // namespace metafuse::runtime
