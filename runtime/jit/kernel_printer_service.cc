#include "runtime/jit/kernel_printer_service.h"

#include <memory>
#include <mutex>

#include "absl/strings/str_cat.h"

namespace metafuse::runtime {
namespace {

std::mutex service_mutex;
std::unique_ptr<KernelPrinterService>& Service() {
  static auto* service = new std::unique_ptr<KernelPrinterService>();
  return *service;
}

}  // namespace

void RegisterKernelPrinterService(KernelPrinterService service) {
  std::lock_guard<std::mutex> lock(service_mutex);
  Service() = std::make_unique<KernelPrinterService>(std::move(service));
}

absl::StatusOr<const KernelPrinterService*> GetKernelPrinterService(const std::string& purpose) {
  std::lock_guard<std::mutex> lock(service_mutex);
  if (Service() == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        purpose, " needs metafuse's compiler (its kernel printers), and this process links only "
        "the runtime; run the program with the LLVM back end (METAFUSE_HOST_BACKEND=llvm) or "
        "from an artifact saved with its shared object, or link the compiler "
        "(//compiler/codegen:kernel_printer_registration)"));
  }
  return Service().get();
}

void UnregisterKernelPrinterServiceForTesting() {
  std::lock_guard<std::mutex> lock(service_mutex);
  Service().reset();
}

}  // namespace metafuse::runtime
