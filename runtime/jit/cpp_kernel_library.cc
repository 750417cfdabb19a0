#include "runtime/jit/cpp_kernel_library.h"

#include <chrono>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "runtime/jit/host_compiler.h"
#include "runtime/jit/kernel_printer_service.h"

namespace metafuse::runtime {
namespace {

// Kernels by name, each once, in their first order.
std::vector<const KernelCode*> Distinct(const std::vector<const KernelCode*>& kernels) {
  std::vector<const KernelCode*> out;
  std::set<std::string> seen;
  for (const KernelCode* k : kernels) {
    if (seen.insert(k->name).second) out.push_back(k);
  }
  return out;
}

absl::Status ResolveFunctions(const std::vector<const KernelCode*>& kernels,
                              CppKernelLibrary& library) {
  for (const KernelCode* k : Distinct(kernels)) {
    auto address = library.object->Symbol("mf_" + k->name);
    if (!address.ok()) return address.status();
    library.functions[k->name] = reinterpret_cast<HostKernelFn>(*address);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> PrintCppLibrarySource(const std::vector<const KernelCode*>& kernels) {
  auto service = GetKernelPrinterService("printing fused kernels as C++ (the C++ host back end)");
  if (!service.ok()) return service.status();
  std::string source = (*service)->cpp_prelude;
  for (const KernelCode* k : Distinct(kernels)) {
    auto body = (*service)->print_cpp_kernel(k->name, k->kernel_ir);
    if (!body.ok()) return body.status();
    absl::StrAppend(&source, *body);
  }
  return source;
}

absl::StatusOr<std::string> CppCodegenVersions() {
  auto compiler = HostCompilerVersion();
  if (!compiler.ok()) return compiler.status();
  return absl::StrCat("metafuse cpp_kernel_library 1 / ", *compiler, " / ", kSharedObjectFlags);
}

absl::StatusOr<CppKernelLibrary> BuildCppKernelLibrary(
    const std::vector<const KernelCode*>& kernels, KernelCache* cache) {
  const auto start = std::chrono::steady_clock::now();
  auto source = PrintCppLibrarySource(kernels);
  if (!source.ok()) return source.status();
  auto versions = CppCodegenVersions();
  if (!versions.ok()) return versions.status();
  CppKernelLibrary library;
  library.target = HostCodeTarget();
  const KernelKey key{*source, library.target, *versions};
  std::optional<std::string> cached;
  if (cache != nullptr) cached = cache->Lookup(key);
  const std::string label = absl::StrCat("shared object of ", Distinct(kernels).size(),
                                         " kernels (", kernels.empty() ? "" : kernels[0]->name,
                                         ", ...)");
  if (cached && !cached->empty()) {
    library.bytes = *std::move(cached);
    library.cache_hit = true;
  } else {
    auto bytes = CompileSharedObject(*source, label);
    if (!bytes.ok()) return bytes.status();
    library.bytes = *std::move(bytes);
  }
  auto object = SharedObject::Load(library.bytes, label);
  if (!object.ok()) return object.status();
  library.object = *std::move(object);
  if (absl::Status s = ResolveFunctions(kernels, library); !s.ok()) return s;
  if (cache != nullptr && !library.cache_hit) {
    if (absl::Status s = cache->Store(key, library.bytes); !s.ok()) return s;
  }
  library.compile_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return library;
}

absl::StatusOr<CppKernelLibrary> LoadCppKernelLibrary(
    const std::vector<const KernelCode*>& kernels, const std::string& bytes,
    const std::string& target) {
  if (absl::Status s = CpuCanRun(target); !s.ok()) return s;
  CppKernelLibrary library;
  library.bytes = bytes;
  library.target = target;
  library.cache_hit = true;
  auto object = SharedObject::Load(bytes, "the artifact's shared object");
  if (!object.ok()) return object.status();
  library.object = *std::move(object);
  if (absl::Status s = ResolveFunctions(kernels, library); !s.ok()) return s;
  return library;
}

}  // namespace metafuse::runtime
