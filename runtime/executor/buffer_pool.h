// The large CPU buffers of compiled programs, kept for the next call. A
// program allocates the same sizes every call (its intermediates,
// activations saved for the backward, fused kernels' outputs); from glibc
// each large one is a fresh mmap whose pages fault in as they are first
// written and are unmapped again when freed. On the conv net's MAML step
// that is several percent of the step (docs/benchmarks.md). The pool keeps
// freed blocks of 128 KiB and more that were allocated while a program ran
// on this thread, by size, and hands them to the next allocation of that
// size made while a program runs; eager work outside programs allocates as
// before.
//
// Installed under c10's CPU allocator on the first program run (below the
// memory meter, which counts tensors, not the pool). METAFUSE_BUFFER_POOL_MB
// bounds the bytes kept (default 1024; 0: no pool).
#pragma once

#include <cstdint>

namespace metafuse::runtime {

// Installs the pool (once per process; nothing when the bound is 0).
void InstallBufferPool();

// While one lives on a thread, that thread's large allocations come from
// and return to the pool.
class ProgramAllocationScope {
 public:
  ProgramAllocationScope();
  ~ProgramAllocationScope();
  ProgramAllocationScope(const ProgramAllocationScope&) = delete;
  ProgramAllocationScope& operator=(const ProgramAllocationScope&) = delete;
};

struct BufferPoolStats {
  int64_t cached_bytes = 0;  // freed blocks kept for reuse
  int64_t reused = 0;        // allocations served from the pool
  int64_t fresh = 0;         // pooled-size allocations the pool could not serve
};
BufferPoolStats GetBufferPoolStats();

// Frees every kept block (memory back to the system).
void ReleaseBufferPool();

}  // namespace metafuse::runtime
