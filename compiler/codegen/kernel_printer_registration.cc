// Registers the compiler's kernel printers (C++, and LLVM IR or CUDA C for
// reprinting an untrusted artifact's kernels) as the runtime's kernel
// printer service (runtime/jit/kernel_printer_service.h): the runtime prints
// kernels through the interface it defines, never by including compiler/.
// Linked always (alwayslink in Bazel; one extension in the pip route), so
// that every process holding the compiler registers it before main.
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "compiler/codegen/cpp_printer.h"
#include "compiler/codegen/cuda_printer.h"
#include "compiler/codegen/kernel_ir_parser.h"
#include "compiler/codegen/llvm_printer.h"
#include "runtime/jit/kernel_printer_service.h"

namespace metafuse::codegen {
namespace {

absl::StatusOr<std::string> PrintFromKernelIr(const std::string& name, const std::string& text) {
  if (text.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel '", name, "' has no kernel IR; expected the IR text the C++ printer starts from"));
  }
  auto kernel = kir::Parse(text);
  if (!kernel.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel '", name, "': its kernel IR does not parse: ", kernel.status().message()));
  }
  kernel->name = name;  // the entry point the launch contract names
  return PrintCppKernel(*kernel);
}

// The kernel's name is part of its entry symbol and of printed code: an
// identifier (the parser checks the IR's own names the same way).
absl::Status CheckKernelName(const std::string& name) {
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_') {
      return absl::InvalidArgumentError(absl::StrCat(
          "kernel '", name, "': its name is not an identifier (letters, digits, '_')"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<runtime::KernelCode> KernelCodeFromKernelIr(const std::string& name,
                                                          const std::string& text, bool cuda) {
  if (text.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("kernel '", name, "' has no kernel IR"));
  }
  auto kernel = kir::Parse(text);
  if (!kernel.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel '", name, "': its kernel IR does not parse: ", kernel.status().message()));
  }
  kernel->name = name;
  if (absl::Status s = CheckKernelName(name); !s.ok()) return s;
  return cuda ? CudaKernelCode(*kernel) : HostKernelCode(*kernel);
}

const bool registered = [] {
  runtime::RegisterKernelPrinterService({CppPrelude(), PrintFromKernelIr, KernelCodeFromKernelIr});
  return true;
}();

}  // namespace
}  // namespace metafuse::codegen
