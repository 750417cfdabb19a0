#include "runtime/jit/shared_object.h"

#include <dlfcn.h>
#include <elf.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace metafuse::runtime {

// The loader trusts the file: a truncated object can crash it. So the
// bytes must hold the ELF header, every program header and section header,
// and every segment's file contents.
absl::Status CheckSharedObjectBytes(const std::string& bytes) {
  if (bytes.size() < sizeof(Elf64_Ehdr) || std::memcmp(bytes.data(), ELFMAG, SELFMAG) != 0 ||
      bytes[EI_CLASS] != ELFCLASS64) {
    return absl::InvalidArgumentError(
        absl::StrCat("not an ELF shared object (", bytes.size(), " bytes)"));
  }
  Elf64_Ehdr eh;
  std::memcpy(&eh, bytes.data(), sizeof eh);
  const uint64_t size = bytes.size();
  auto within = [size](uint64_t offset, uint64_t count, uint64_t each) {
    return offset <= size && count * each <= size - offset;
  };
  if (eh.e_type != ET_DYN || eh.e_phentsize != sizeof(Elf64_Phdr) ||
      !within(eh.e_phoff, eh.e_phnum, sizeof(Elf64_Phdr)) ||
      (eh.e_shnum > 0 && !within(eh.e_shoff, eh.e_shnum, eh.e_shentsize))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "not a complete ELF shared object (", bytes.size(), " bytes: truncated or damaged)"));
  }
  for (int i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph;
    std::memcpy(&ph, bytes.data() + eh.e_phoff + i * sizeof ph, sizeof ph);
    if (!within(ph.p_offset, ph.p_filesz, 1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "not a complete ELF shared object (segment ", i, " ends past its ", bytes.size(),
          " bytes: truncated)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<SharedObject>> SharedObject::Load(const std::string& bytes,
                                                                 const std::string& label) {
  if (absl::Status s = CheckSharedObjectBytes(bytes); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": ", s.message()));
  }
  const int fd = memfd_create("metafuse-kernels", MFD_CLOEXEC);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat(label, ": memfd_create: ", std::strerror(errno)));
  }
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      close(fd);
      return absl::InternalError(absl::StrCat(label, ": writing the memory file: ",
                                              std::strerror(err)));
    }
    written += static_cast<size_t>(n);
  }
  // The loader knows objects by path: the descriptor stays open while the
  // object is loaded, so no other object is opened under the same
  // /proc/self/fd/N name (the loader would hand back this one).
  const std::string path = absl::StrCat("/proc/self/fd/", fd);
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": dlopen refused it: ", error ? error : "unknown reason"));
  }
  return std::shared_ptr<SharedObject>(new SharedObject(handle, fd, label));
}

SharedObject::~SharedObject() {
  if (handle_ != nullptr) dlclose(handle_);
  if (fd_ >= 0) close(fd_);
}

absl::StatusOr<void*> SharedObject::Symbol(const std::string& name) const {
  dlerror();
  void* address = dlsym(handle_, name.c_str());
  if (address == nullptr) {
    return absl::NotFoundError(absl::StrCat(label_, " defines no function '", name, "'"));
  }
  return address;
}

}  // namespace metafuse::runtime
