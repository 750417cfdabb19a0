// A shared object loaded from its bytes (a kernel-cache entry, an artifact
// member) rather than from a file the caller manages: the bytes go into an
// anonymous memory file (memfd) that dlopen opens through /proc/self/fd, so
// nothing is left on disk and two processes never race on a path.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace metafuse::runtime {

// The checks Load makes before the loader sees `bytes`: an ELF header,
// every program and section header and every segment's file contents lie
// inside them. An error says which is missing.
absl::Status CheckSharedObjectBytes(const std::string& bytes);

class SharedObject {
 public:
  // dlopen(RTLD_NOW | RTLD_LOCAL) of `bytes`. Bytes that are not a complete
  // ELF shared object (checked before the loader sees them: a truncated one
  // could crash it), or that the loader refuses, give an error with the
  // reason and `label`.
  static absl::StatusOr<std::shared_ptr<SharedObject>> Load(const std::string& bytes,
                                                            const std::string& label);
  ~SharedObject();
  SharedObject(const SharedObject&) = delete;
  SharedObject& operator=(const SharedObject&) = delete;

  // The address of a function the object defines; an error names it.
  absl::StatusOr<void*> Symbol(const std::string& name) const;

 private:
  SharedObject(void* handle, int fd, std::string label)
      : handle_(handle), fd_(fd), label_(std::move(label)) {}
  void* handle_;
  int fd_;  // the memory file, open while loaded
  std::string label_;
};

}  // namespace metafuse::runtime
