// Registers the compiler's C++ kernel printer as the runtime's kernel
// printer service (runtime/jit/kernel_printer_service.h): the runtime prints
// kernels through the interface it defines, never by including compiler/.
// Linked always (alwayslink in Bazel; one extension in the pip route), so
// that every process holding the compiler registers it before main.
#include "absl/strings/str_cat.h"
#include "compiler/codegen/cpp_printer.h"
#include "compiler/codegen/kernel_ir_parser.h"
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

const bool registered = [] {
  runtime::RegisterKernelPrinterService({CppPrelude(), PrintFromKernelIr});
  return true;
}();

}  // namespace
}  // namespace metafuse::codegen
