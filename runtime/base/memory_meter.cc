#include "runtime/base/memory_meter.h"

#include <algorithm>
#include <atomic>
#include <mutex>

#include <c10/core/CPUAllocator.h>

#include "runtime/base/torch_compat.h"

namespace metafuse::runtime {
namespace {

std::atomic<int64_t> live{0}, peak{0}, allocations{0};
std::atomic<bool> installed{false};

// The wrapped allocation: the original DataPtr (which frees the memory when
// destroyed) and its size.
struct Counted {
  c10::DataPtr original;
  int64_t bytes;
};

void Release(void* context) {
  auto* counted = static_cast<Counted*>(context);
  live -= counted->bytes;
  delete counted;  // destroys the original DataPtr: the base allocator frees
}

class CountingAllocator final : public compat::WrappingAllocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : WrappingAllocator(base) {}

  c10::DataPtr Allocate(size_t n) const override {
    c10::DataPtr original = base()->allocate(n);
    void* data = original.get();
    const c10::Device device = original.device();
    const int64_t now = live += static_cast<int64_t>(n);
    int64_t seen = peak.load();
    while (now > seen && !peak.compare_exchange_weak(seen, now)) {
    }
    ++allocations;
    return {data, new Counted{std::move(original), static_cast<int64_t>(n)}, &Release,
            device};
  }

  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
};

}  // namespace

void InstallMemoryMeter() {
  static std::once_flag once;
  std::call_once(once, [] {
    static CountingAllocator counting(c10::GetCPUAllocator());
    // Priority above the default CPU allocator's registration.
    c10::SetCPUAllocator(&counting, /*priority=*/100);
    installed = true;
  });
}

bool MemoryMeterInstalled() { return installed; }

MemoryStats GetMemoryStats() { return {live.load(), peak.load(), allocations.load()}; }

void ResetPeakMemory() { peak = live.load(); }

}  // namespace metafuse::runtime
