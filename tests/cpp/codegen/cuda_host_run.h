// Test helper: runs printed CUDA kernels (compiler/codegen/cuda_printer.h) on the
// CPU. The source is compiled as host C++ with tests/cpp/codegen/cuda_host_shim.h
// by the system compiler into a shared object, with one wrapper per kernel
// that calls the __global__ function for every (block, thread) of a grid,
// one after another; each thread runs its whole grid-stride loop.
#pragma once

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/codegen/c_renderer.h"
#include "compiler/codegen/cuda_printer.h"
#include "tests/cpp/codegen/test_kernels.h"

namespace metafuse::codegen::testing {

inline std::string MakeTempDir(const char* prefix) {
  std::string tmpl = absl::StrCat("/tmp/", prefix, "_XXXXXX");
  if (mkdtemp(tmpl.data()) == nullptr) return "";
  return tmpl;
}

// CudaPrelude() and every kernel, in one translation unit.
inline std::string CombinedCudaSource(const std::vector<kir::Kernel>& kernels) {
  std::string src = CudaPrelude();
  for (const kir::Kernel& k : kernels) {
    auto body = PrintCudaKernel(k);
    EXPECT_TRUE(body.ok()) << body.status();
    src += body.value_or("");
  }
  return src;
}

// extern "C" host_mf_<name>(n, inputs, outputs, scalars, grid, block): runs
// kernel k's whole grid.
inline std::string HostGridRunner(const kir::Kernel& k) {
  std::string args = "n";
  for (size_t j = 0; j < k.inputs.size(); ++j) {
    absl::StrAppend(&args, ", static_cast<const ", CRenderer::TypeName(k.inputs[j].dtype),
                    "*>(in[", j, "])");
  }
  for (size_t j = 0; j < k.outputs.size(); ++j) {
    absl::StrAppend(&args, ", static_cast<",
                    CRenderer::TypeName(k.nodes[k.outputs[j].node].dtype), "*>(out[", j, "])");
  }
  for (size_t j = 0; j < k.scalars.size(); ++j) absl::StrAppend(&args, ", sc[", j, "]");
  return absl::StrCat(
      "extern \"C\" void host_", CudaKernelSymbol(k),
      "(long long n, const void* const* in, void* const* out, const double* sc,\n"
      "    unsigned grid, unsigned block) {\n"
      "  gridDim.x = grid; blockDim.x = block;\n"
      "  for (unsigned b = 0; b < grid; ++b) {\n"
      "    for (unsigned t = 0; t < block; ++t) {\n"
      "      blockIdx.x = b; threadIdx.x = t;\n"
      "      ", CudaKernelSymbol(k), "(", args, ");\n"
      "    }\n  }\n}\n");
}

using HostGridFn = void (*)(long long, const void* const*, void* const*, const double*,
                            unsigned, unsigned);

// Compiles all kernels (g++ -ffp-contract=off, the host's analogue of NVRTC
// --fmad=false) and checks each against kir::Interpret on grids smaller than
// n (many grid-stride steps per thread) and larger (idle threads): every
// output bit for bit, NaN matching NaN. Outputs start as a byte pattern, so
// an element no thread writes fails. Skips without g++.
inline void ExpectHostShimGridRunsMatchInterpreter(const std::vector<kir::Kernel>& kernels) {
  if (std::system("g++ --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "no g++ on PATH";
  const std::string shim =
      std::filesystem::absolute("tests/cpp/codegen/cuda_host_shim.h").string();
  ASSERT_TRUE(std::filesystem::exists(shim)) << shim;
  std::string source = CombinedCudaSource(kernels);
  for (const kir::Kernel& k : kernels) source += HostGridRunner(k);
  const std::string dir = MakeTempDir("mf_cuda_host");
  ASSERT_FALSE(dir.empty());
  std::ofstream(dir + "/kernels.cc") << source;
  const std::string cmd = absl::StrCat(
      "g++ -std=c++17 -O1 -ffp-contract=off -shared -fPIC -include ", shim, " ", dir,
      "/kernels.cc -o ", dir, "/kernels.so 2> ", dir, "/log.txt");
  ASSERT_EQ(std::system(cmd.c_str()), 0)
      << cmd << "\n" << std::ifstream(dir + "/log.txt").rdbuf();
  void* lib = dlopen((dir + "/kernels.so").c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  struct Grid {
    int64_t n;
    unsigned grid, block;
  };
  const Grid grids[] = {{1, 3, 32}, {7, 2, 4}, {97, 3, 32}, {1031, 2, 64}};
  for (const kir::Kernel& k : kernels) {
    auto fn = reinterpret_cast<HostGridFn>(dlsym(lib, ("host_" + CudaKernelSymbol(k)).c_str()));
    ASSERT_NE(fn, nullptr) << k.name;
    for (const Grid& g : grids) {
      Buffers want(k, g.n, 11), got(k, g.n, 11);
      for (auto& out : got.out) std::fill(out.begin(), out.end(), char{0x7b});
      ASSERT_TRUE(kir::Interpret(k, g.n, want.in_ptrs, want.out_ptrs, want.scalars).ok());
      fn(g.n, got.in_ptrs.data(), got.out_ptrs.data(), got.scalars.data(), g.grid, g.block);
      for (size_t o = 0; o < k.outputs.size(); ++o) {
        int64_t where = -1;
        EXPECT_EQ(MaxUlp(k, o, want, got, g.n, &where), 0)
            << k.name << " output " << k.outputs[o].name << " n=" << g.n << " at " << where
            << "\n" << kir::Print(k);
      }
    }
  }
  dlclose(lib);
  std::filesystem::remove_all(dir);
}

}  // namespace metafuse::codegen::testing
