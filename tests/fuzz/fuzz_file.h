// Loaders that read a file by name (the artifact archive, the kernel
// cache) get each input through a private scratch directory, created once
// per process and removed at exit.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/fuzz/fuzz_check.h"

namespace metafuse::fuzz {

inline const std::string& ScratchDirectory() {
  // Never destroyed: the exit handler that removes it runs after statics die.
  static const std::string* dir = [] {
    const char* base = std::getenv("TMPDIR");
    auto* pattern = new std::string(
        std::string(base != nullptr && base[0] == '/' ? base : "/tmp") + "/metafuse-fuzz-XXXXXX");
    FUZZ_CHECK(mkdtemp(pattern->data()) != nullptr, "a scratch directory");
    std::atexit([] { std::system(("rm -rf '" + ScratchDirectory() + "'").c_str()); });
    return pattern;
  }();
  return *dir;
}

inline void WriteFile(const std::string& path, const uint8_t* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  FUZZ_CHECK(f != nullptr, "the scratch file opens");
  FUZZ_CHECK(size == 0 || std::fwrite(data, 1, size, f) == size, "the scratch file is written");
  std::fclose(f);
}

}  // namespace metafuse::fuzz
