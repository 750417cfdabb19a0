// Exact accounting of CPU tensor memory, for benchmarks and tests: once
// installed, every CPU allocation made through c10's allocator (eager ops,
// compiled instructions, fused-kernel outputs) is counted while it lives,
// and the peak of live bytes is kept.
#pragma once

#include <cstdint>

namespace metafuse::runtime {

struct MemoryStats {
  int64_t live_bytes = 0;  // allocated since Install and not yet freed
  int64_t peak_bytes = 0;  // max of live_bytes since the last ResetPeak
  int64_t allocations = 0;
};

// Wraps c10's CPU allocator with a counting one (idempotent). Memory
// allocated before the call is not counted, nor is its release.
void InstallMemoryMeter();
bool MemoryMeterInstalled();
MemoryStats GetMemoryStats();
// peak := live (measure the peak of the next region from its start level).
void ResetPeakMemory();

}  // namespace metafuse::runtime
