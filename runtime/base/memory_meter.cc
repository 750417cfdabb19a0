#include "runtime/base/memory_meter.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <unordered_map>

#include <c10/core/CPUAllocator.h>

#include "runtime/base/torch_compat.h"

namespace metafuse::runtime {
namespace {

std::atomic<int64_t> live{0}, peak{0}, allocations{0};
std::atomic<bool> installed{false};

// What is counted, by data pointer: the original DataPtr (which frees the
// memory when destroyed) and its size. The DataPtrs this allocator returns
// keep the data pointer as their context, as c10's own do: ATen takes raw
// memory through Allocator::raw_allocate, which asserts exactly that
// (torch 2.x's fx recording reaches it), so a context object of our own
// would break every raw allocation while the meter is installed.
struct Counted {
  c10::DataPtr original;
  int64_t bytes;
};

std::mutex counted_mutex;
std::unordered_map<void*, Counted>& CountedBlocks() {
  static auto* blocks = new std::unordered_map<void*, Counted>();  // never destroyed
  return *blocks;
}

// The base allocator's raw deleter: memory raw_allocate took before the
// meter was installed may come back through the meter's raw_deleter (ATen
// asks the current CPU allocator when it frees).
c10::DeleterFnPtr base_raw_deleter = nullptr;

void Release(void* data) {
  Counted counted;
  {
    std::lock_guard<std::mutex> lock(counted_mutex);
    auto it = CountedBlocks().find(data);
    if (it == CountedBlocks().end()) {
      // Not ours: the base's. A deleter must not throw; without a base raw
      // deleter there is no way to free it, which c10's allocators never do.
      if (base_raw_deleter != nullptr) base_raw_deleter(data);
      return;
    }
    counted = std::move(it->second);
    CountedBlocks().erase(it);
  }
  live -= counted.bytes;
  // counted.original is destroyed here, outside the lock: the base frees.
}

class CountingAllocator final : public compat::WrappingAllocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : WrappingAllocator(base) {}

  c10::DataPtr Allocate(size_t n) const override {
    c10::DataPtr original = base()->allocate(n);
    void* data = original.get();
    if (data == nullptr) return original;  // zero bytes: nothing to count
    const c10::Device device = original.device();
    {
      std::lock_guard<std::mutex> lock(counted_mutex);
      CountedBlocks().emplace(data, Counted{std::move(original), static_cast<int64_t>(n)});
    }
    const int64_t now = live += static_cast<int64_t>(n);
    int64_t seen = peak.load();
    while (now > seen && !peak.compare_exchange_weak(seen, now)) {
    }
    ++allocations;
    return {data, data, &Release, device};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &Release; }
};

}  // namespace

void InstallMemoryMeter() {
  static std::once_flag once;
  std::call_once(once, [] {
    c10::Allocator* base = c10::GetCPUAllocator();
    base_raw_deleter = base->raw_deleter();
    static CountingAllocator counting(base);
    // Priority above the default CPU allocator's registration.
    c10::SetCPUAllocator(&counting, /*priority=*/100);
    installed = true;
  });
}

bool MemoryMeterInstalled() { return installed; }

MemoryStats GetMemoryStats() { return {live.load(), peak.load(), allocations.load()}; }

void ResetPeakMemory() { peak = live.load(); }

}  // namespace metafuse::runtime
