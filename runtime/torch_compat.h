// The LibTorch API differences between the torch versions metafuse builds
// against (Debian's 1.13.1 with Bazel; any 1.13 - 2.x with pip), in one place:
// sources use what this header defines instead of testing versions
// themselves. docs/building.md lists every API checked and how.
#pragma once

#include <torch/version.h>

#include <c10/core/Allocator.h>

#include <cstddef>

// True when the torch being compiled against is `major.minor` or newer.
#define METAFUSE_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||           \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace metafuse::compat {

// A c10::Allocator that passes requests to `base`, with Allocate() as the one
// member subclasses write. torch 2.3 (pytorch#120969) made
// c10::Allocator::allocate non-const and copy_data a pure virtual member;
// 1.13 has `allocate(size_t) const` and no copy_data.
class WrappingAllocator : public c10::Allocator {
 public:
  explicit WrappingAllocator(c10::Allocator* base) : base_(base) {}

#if METAFUSE_TORCH_AT_LEAST(2, 3)
  c10::DataPtr allocate(size_t n) override { return Allocate(n); }
  // Memory comes from `base`, so it copies it.
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    base_->copy_data(dest, src, count);
  }
#else
  c10::DataPtr allocate(size_t n) const override { return Allocate(n); }
#endif

 protected:
  virtual c10::DataPtr Allocate(size_t n) const = 0;
  c10::Allocator* base() const { return base_; }

 private:
  c10::Allocator* base_;
};

}  // namespace metafuse::compat
