// The LibTorch API differences between the torch versions metafuse builds
// against (Debian's 1.13.1 with Bazel; any 1.13 - 2.x with pip), in one place:
// sources use what this header defines instead of testing versions
// themselves. docs/building.md lists every API checked and how.
#pragma once

#include <torch/version.h>

#include <c10/core/Allocator.h>
#include <c10/util/Exception.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

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

// Collects the messages of the torch warnings raised while it lives (it
// installs itself as c10's warning handler and restores the previous one).
// torch 2.x passes a c10::Warning to WarningHandler::process and moved the
// guard to c10::WarningUtils; 1.13 passes (location, message, verbatim).
class WarningCollector : public c10::WarningHandler {
 public:
#if METAFUSE_TORCH_AT_LEAST(2, 0)
  WarningCollector() : guard_(std::make_unique<c10::WarningUtils::WarningHandlerGuard>(this)) {}
  void process(const c10::Warning& warning) override { messages_.push_back(warning.msg()); }
#else
  WarningCollector() : guard_(std::make_unique<c10::Warning::WarningHandlerGuard>(this)) {}
  void process(const c10::SourceLocation&, const std::string& message, bool) override {
    messages_.push_back(message);
  }
#endif
  const std::vector<std::string>& messages() const { return messages_; }

 private:
  std::vector<std::string> messages_;
#if METAFUSE_TORCH_AT_LEAST(2, 0)
  std::unique_ptr<c10::WarningUtils::WarningHandlerGuard> guard_;
#else
  std::unique_ptr<c10::Warning::WarningHandlerGuard> guard_;
#endif
};

}  // namespace metafuse::compat
